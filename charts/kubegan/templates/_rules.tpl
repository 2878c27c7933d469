{{/* kubegan's alert rule groups (a list of Prometheus rule groups), shared by the
prometheus-operator PrometheusRule and Google Managed Prometheus' ClusterRules. */}}
{{- define "kubegan.ruleGroups" -}}
{{- $r := .Values.monitoring.prometheusRule }}
{{- $budget := $r.costBudget }}
{{- if $budget.jobs }}
# Per-job budgets as series, so one alert compares every job with its own budget.
- name: kubegan-budgets
  rules:
  {{- range $budget.jobs }}
  - record: kubegan:job_budget_dollars
    expr: vector({{ .dollars }})
    labels:
      namespace: {{ .namespace | quote }}
      ganjob: {{ .name | quote }}
  {{- end }}
{{- end }}
- name: kubegan-alerts
  rules:
  # kubegan_jobs counts jobs by phase (operator); a Failed job stays until it is deleted
  # or its ttlSecondsAfterFinished expires, like kube-state-metrics' KubeJobFailed.
  - alert: KubeganJobFailed
    expr: kubegan_jobs{phase="Failed"} > 0
    labels:
      severity: {{ $r.severity }}
    annotations:
      summary: GANTrainingJobs failed
      description: >-
        {{`{{ $value }}`}} GANTrainingJob(s) are in phase Failed (backoffLimit,
        maxPreemptions or activeDeadlineSeconds exceeded). See `kubectl get ganjob -A` and
        `kubectl describe ganjob` for the reason.
  # Trainer rank 0 exports kubegan_epoch (last finished epoch). No change for the whole
  # `for` period means a hung gang (e.g. a collective waiting on a lost peer) or an epoch
  # longer than expected. The series is gone when no trainer runs, so finished or pending
  # jobs never fire. max by (namespace, ganjob) joins the series of successive gangs.
  - alert: KubeganJobNoEpochProgress
    expr: max by (namespace, ganjob) (changes(kubegan_epoch[5m])) == 0
    for: {{ $r.noProgressMinutes }}m
    labels:
      severity: {{ $r.severity }}
    annotations:
      summary: GANTrainingJob makes no epoch progress
      description: >-
        {{`{{ $labels.namespace }}/{{ $labels.ganjob }}`}} finished no epoch for more than
        {{ $r.noProgressMinutes }} minutes. Check its worker logs
        (`kubectl logs {{`{{ $labels.ganjob }}`}}-worker-0 -n {{`{{ $labels.namespace }}`}}`).
  {{- if or $budget.jobs (not (kindIs "invalid" $budget.defaultDollars)) }}
  # Operator's accrued cost vs the job's budget (kubegan:job_budget_dollars) or the default.
  - alert: KubeganJobOverBudget
    expr: |-
      {{- if $budget.jobs }}
      (kubegan_job_cost_dollars > on (namespace, ganjob) group_left () kubegan:job_budget_dollars)
      {{- end }}
      {{- if and $budget.jobs (not (kindIs "invalid" $budget.defaultDollars)) }}
      or
      {{- end }}
      {{- if not (kindIs "invalid" $budget.defaultDollars) }}
      (kubegan_job_cost_dollars > {{ $budget.defaultDollars }}
      {{- if $budget.jobs }} unless on (namespace, ganjob) kubegan:job_budget_dollars{{ end }})
      {{- end }}
    labels:
      severity: {{ $r.severity }}
    annotations:
      summary: GANTrainingJob cost is above its budget
      description: >-
        {{`{{ $labels.namespace }}/{{ $labels.ganjob }} has cost ${{ printf "%.2f" $value }}`}},
        above its budget. Suspend it with `kubectl patch ganjob {{`{{ $labels.ganjob }}`}}
        -n {{`{{ $labels.namespace }}`}} --type merge -p '{"spec":{"runPolicy":{"suspend":true}}}'`.
  {{- end }}
{{- end -}}
