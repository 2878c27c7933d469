{{/* Names and labels shared by every template. */}}

{{- define "kubegan.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kubegan.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "kubegan.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "kubegan.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kubegan.operatorName" -}}
{{- printf "%s-operator" (include "kubegan.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kubegan.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: stable across upgrades (a Deployment's selector is immutable). */}}
{{- define "kubegan.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubegan.name" . }}-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kubegan.labels" -}}
helm.sh/chart: {{ include "kubegan.chart" . }}
{{ include "kubegan.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: kubegan
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "kubegan.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kubegan.operatorName" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kubegan.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* A framework's default trainer image: trainerImages.<framework> when set, else the
Dockerfile target next to the operator image (same registry path and tag), which is what
.github/workflows/release.yml pushes: <registry>/trainer-torch:<appVersion>.
Call with (list $ "pytorch" "trainer-torch"). */}}
{{- define "kubegan.trainerImage" -}}
{{- $root := index . 0 -}}
{{- $set := index $root.Values.trainerImages (index . 1) -}}
{{- $tag := default $root.Chart.AppVersion $root.Values.image.tag -}}
{{- default (printf "%s/%s:%s" (dir $root.Values.image.repository) (index . 2) $tag) $set -}}
{{- end -}}

{{/* Labels for prometheus-operator objects: common + monitoring.labels + the object's own. */}}
{{- define "kubegan.monitoringLabels" -}}
{{- $root := index . 0 -}}
{{- $own := index . 1 -}}
{{ include "kubegan.labels" $root }}
{{- with merge (dict) $own $root.Values.monitoring.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The ServiceMonitor/PodMonitor API versions to render, as a JSON list: prometheus-operator's
when the monitor is enabled, Azure Managed Prometheus' (ama-metrics reads the same spec under
its own group) when monitoring.azureManagedPrometheus.enabled; each only where the cluster
serves it, so `helm install` works without the CRDs. Call with (list $ <monitor enabled>). */}}
{{- define "kubegan.monitorApis" -}}
{{- $root := index . 0 -}}
{{- $apis := list -}}
{{- if and (index . 1) ($root.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") -}}
{{- $apis = append $apis "monitoring.coreos.com/v1" -}}
{{- end -}}
{{- if and $root.Values.monitoring.azureManagedPrometheus.enabled ($root.Capabilities.APIVersions.Has "azmonitoring.coreos.com/v1") -}}
{{- $apis = append $apis "azmonitoring.coreos.com/v1" -}}
{{- end -}}
{{- toJson $apis -}}
{{- end -}}
