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

{{/* Every object's labels: the selector's, the chart's and commonLabels. */}}
{{- define "phe.labels" -}}
{{ include "phe.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The labels of a monitoring object (ServiceMonitor, PrometheusRule,
ScrapeConfig, dashboards): the chart's, the release label of releaseLabel,
then the object's additionalLabels (the argument "extra").
*/}}
{{- define "phe.monitoringLabels" -}}
{{ include "phe.labels" .root }}
{{- with include "phe.release" .root }}
release: {{ . | quote }}
{{- end }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The value of the release label: releaseLabel's string, or this release's name for true. */}}
{{- define "phe.release" -}}
{{- if kindIs "bool" .Values.releaseLabel -}}
{{- if .Values.releaseLabel }}{{ .Release.Name }}{{ end -}}
{{- else -}}
{{- .Values.releaseLabel -}}
{{- end -}}
{{- end -}}

{{- define "phe.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "phe.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The image: global.imageRegistry or image.registry, the repository, and the
digest when set, else the tag (appVersion by default).
*/}}
{{- define "phe.image" -}}
{{- $registry := .Values.global.imageRegistry | default .Values.image.registry -}}
{{- $ref := .Values.image.repository -}}
{{- if $registry }}{{ $ref = printf "%s/%s" $registry $ref }}{{ end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $ref .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $ref (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The Service's DNS name and port inside the cluster. */}}
{{- define "phe.serviceHost" -}}
{{- printf "%s.%s.svc" (include "phe.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* The exporter's Service URL inside the cluster, for /sd. */}}
{{- define "phe.serviceURL" -}}
{{- printf "%s://%s:%d" (lower .Values.serviceMonitor.scheme) (include "phe.serviceHost" .) (int .Values.service.port) -}}
{{- end -}}

{{/*
How Prometheus reaches the exporter: the scheme, TLS and credentials of
serviceMonitor's values, for the ServiceMonitor's endpoint, the
ScrapeConfig and its /sd requests alike. With https and no serverName the
Service's name is the serverName: the ServiceMonitor scrapes Pod IPs, the
ScrapeConfig the Service's name, and one certificate for that name serves
both. Rendered as fields at the indentation of the caller.
*/}}
{{- define "phe.scrapeAuth" -}}
{{- $sm := .Values.serviceMonitor -}}
{{- $tls := deepCopy $sm.tlsConfig -}}
{{- if and (eq (lower $sm.scheme) "https") (not (get $tls "serverName")) -}}
{{- $_ := set $tls "serverName" (include "phe.serviceHost" .) -}}
{{- end -}}
{{- with $tls }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $sm.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $sm.authorization }}
authorization:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
"true" when the configuration has an in-cluster kubernetes entry (one
without kubeconfig), which checks this cluster with the Pod's
ServiceAccount token and the ClusterRole; "" otherwise (gcp, kvm or other
clusters' kubeconfigs only).
*/}}
{{- define "phe.inCluster" -}}
{{- $in := false -}}
{{- range (dig "kubernetes" list (.Values.config | default dict)) -}}
{{- if and (kindIs "map" .) (not (get . "kubeconfig")) }}{{ $in = true }}{{ end -}}
{{- end -}}
{{- if $in }}true{{ end -}}
{{- end -}}

{{/*
"true" or "false": whether the Pod mounts its ServiceAccount token
(serviceAccount.automountServiceAccountToken, or when null whether an
in-cluster kubernetes entry needs it).
*/}}
{{- define "phe.automountToken" -}}
{{- /* dig: Helm drops a key whose value is null, the default. */ -}}
{{- $v := dig "automountServiceAccountToken" "" .Values.serviceAccount -}}
{{- if kindIs "bool" $v }}{{ $v }}{{ else }}{{ eq (include "phe.inCluster" .) "true" }}{{ end -}}
{{- end -}}

{{/*
"true" when the ClusterRole and its binding are rendered (rbac.create, or
when null whether an in-cluster kubernetes entry needs them).
*/}}
{{- define "phe.rbacCreate" -}}
{{- $v := dig "create" "" .Values.rbac -}}
{{- if kindIs "bool" $v }}{{ if $v }}true{{ end }}{{ else }}{{ include "phe.inCluster" . }}{{ end -}}
{{- end -}}

{{/*
The Pod template's labels: the selector's, then commonLabels and podLabels
(podLabels win a key both set: they are the Pod's own).
*/}}
{{- define "phe.podLabels" -}}
{{ include "phe.selectorLabels" . }}
{{- with merge (dict) (.Values.podLabels | default dict) (.Values.commonLabels | default dict) }}
{{ toYaml . }}
{{- end }}
{{- end -}}
