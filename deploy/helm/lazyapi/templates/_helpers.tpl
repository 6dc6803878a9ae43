{{- define "lazyapi.selectorLabels" -}}
app.kubernetes.io/name: lazyapi
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "lazyapi.labels" -}}
{{ include "lazyapi.selectorLabels" . }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
