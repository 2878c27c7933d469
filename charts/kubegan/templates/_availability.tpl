{{/* The operator's availability with operator.replicas > 1 (values.yaml
operator.highAvailability, docs/security.md "Operator availability"). With one replica none of
it renders: a PodDisruptionBudget would block every drain, and a spread has nothing to spread. */}}

{{- define "kubegan.highlyAvailable" -}}
{{- if gt (int .Values.operator.replicas) 1 -}}true{{- end -}}
{{- end -}}

{{/* The operator pod's affinity: .Values.affinity (a preset's node affinity) plus, when spread
over nodes, a preferred anti-affinity on the hostname appended to any podAntiAffinity terms
already there. Preferred, not required: on one node the replicas still schedule. */}}
{{- define "kubegan.affinity" -}}
{{- $affinity := deepCopy (.Values.affinity | default dict) -}}
{{- $ha := .Values.operator.highAvailability | default dict -}}
{{- if and (include "kubegan.highlyAvailable" .) $ha.spreadOverNodes -}}
{{- $anti := get $affinity "podAntiAffinity" | default dict -}}
{{- $preferred := get $anti "preferredDuringSchedulingIgnoredDuringExecution" | default list -}}
{{- $selector := dict "matchLabels" (include "kubegan.selectorLabels" . | fromYaml) -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" $selector -}}
{{- $preferred = append $preferred (dict "weight" 100 "podAffinityTerm" $term) -}}
{{- $_ := set $anti "preferredDuringSchedulingIgnoredDuringExecution" $preferred -}}
{{- $_ := set $affinity "podAntiAffinity" $anti -}}
{{- end -}}
{{- with $affinity }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* The operator pod's topology spread: .Values.topologySpreadConstraints plus, when spread
over zones and none of those already spreads over the zone (the API refuses two constraints
of one key and policy), maxSkew 1 over topology.kubernetes.io/zone, ScheduleAnyway (a
one-zone cluster still schedules). matchLabelKeys pod-template-hash: a rollout's new pods
spread among themselves, not against the old ReplicaSet's. */}}
{{- define "kubegan.topologySpreadConstraints" -}}
{{- $constraints := .Values.topologySpreadConstraints | default list -}}
{{- $ha := .Values.operator.highAvailability | default dict -}}
{{- $zone := "topology.kubernetes.io/zone" -}}
{{- if and (include "kubegan.highlyAvailable" .) $ha.spreadOverZones -}}
{{- $taken := false -}}
{{- range $constraints }}{{ if eq .topologyKey $zone }}{{ $taken = true }}{{ end }}{{ end -}}
{{- if not $taken -}}
{{- $selector := dict "matchLabels" (include "kubegan.selectorLabels" . | fromYaml) -}}
{{- $constraints = append $constraints (dict "maxSkew" 1 "topologyKey" $zone
      "whenUnsatisfiable" "ScheduleAnyway" "labelSelector" $selector
      "matchLabelKeys" (list "pod-template-hash")) -}}
{{- end -}}
{{- end -}}
{{- with $constraints }}{{ toYaml . }}{{ end -}}
{{- end -}}
