{{/* The chart's name, or nameOverride. */}}
{{- define "phe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The objects' name: fullnameOverride, else the release name when it already
contains the chart's name, else <release>-<chart>.
*/}}
{{- define "phe.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "phe.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "phe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "phe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "phe.labels" -}}
{{ include "phe.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "phe.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "phe.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The exporter's Service URL inside the cluster, for /sd. */}}
{{- define "phe.serviceURL" -}}
{{- printf "http://%s.%s.svc:%d" (include "phe.fullname" .) .Release.Namespace (int .Values.service.port) -}}
{{- end -}}
