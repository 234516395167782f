{{/* Chart name, truncated to the 63 characters Kubernetes names allow. */}}
{{- define "meshcast.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified base name for every resource of the chart. */}}
{{- define "meshcast.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels shared by all resources. */}}
{{- define "meshcast.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: meshcast
{{- end }}

{{/*
Selector labels of one component ("controller" or "worker"). The name label
is meshcast-<component>: the ServiceMonitors use it as the Prometheus job
name, which the alert rules and dashboards expect.
*/}}
{{- define "meshcast.selectorLabels" -}}
app.kubernetes.io/name: meshcast-{{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}

{{/* All labels of one component's resources (shared + selector labels). */}}
{{- define "meshcast.componentLabels" -}}
{{ include "meshcast.labels" .root }}
app.kubernetes.io/name: meshcast-{{ .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* image reference of a component's values (repository, tag). */}}
{{- define "meshcast.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) }}
{{- end }}

{{/* true when the workers drive GPUs. */}}
{{- define "meshcast.workerUsesGpus" -}}
{{- if hasPrefix "cuda" .Values.worker.devices }}true{{ end }}
{{- end }}
