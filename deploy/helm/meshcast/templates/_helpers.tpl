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

{{/*
TLS arguments of a daemon (.component "controller" or "worker"): the mounted
kubernetes.io/tls Secret's files, or --insecure when TLS is off.
*/}}
{{- define "meshcast.tlsArgs" -}}
{{- $v := .root.Values -}}
{{- if $v.tls.enabled -}}
- --tls_cert=/etc/meshcast/tls/tls.crt
- --tls_key=/etc/meshcast/tls/tls.key
- --tls_ca=/etc/meshcast/tls/ca.crt
{{- if eq .component "controller" }}
{{- if $v.tls.tokens.enabled }}
- --tokens_file=/etc/meshcast/tokens/{{ $v.tls.tokens.key }}
{{- end }}
{{- else }}
- --controller_identity={{ $v.tls.controllerIdentity }}
{{- end }}
{{- else }}
- --insecure
{{- end }}
{{- if $v.monitoring.metricsWebConfig.enabled }}
- --metrics_web_config=/etc/meshcast/metrics/{{ $v.monitoring.metricsWebConfig.key }}
{{- end }}
{{- end }}

{{/*
Health probes on the gRPC port. Without TLS: the standard gRPC health
service both daemons serve. With TLS: a TCP connect, because the kubelet's
gRPC probe speaks plaintext only and cannot complete a TLS handshake (let
alone present a client certificate).
*/}}
{{- define "meshcast.probes" -}}
{{- $check := dict "grpc" (dict "port" .port) -}}
{{- if .root.Values.tls.enabled -}}
{{- $check = dict "tcpSocket" (dict "port" "grpc") -}}
{{- end }}
startupProbe:
  {{- toYaml $check | nindent 2 }}
  periodSeconds: 2
  failureThreshold: {{ .startupFailures }}
readinessProbe:
  {{- toYaml $check | nindent 2 }}
  periodSeconds: 5
  failureThreshold: 2
livenessProbe:
  {{- toYaml $check | nindent 2 }}
  periodSeconds: 10
  failureThreshold: 3
{{- end }}

{{/* Volume mounts of the TLS, token and metrics web config Secrets. */}}
{{- define "meshcast.secretMounts" -}}
{{- $v := .root.Values -}}
{{- if $v.tls.enabled }}
- name: tls
  mountPath: /etc/meshcast/tls
  readOnly: true
{{- if and (eq .component "controller") $v.tls.tokens.enabled }}
# The mode-0600 copy made by the init container (meshcast.tokensInit).
- name: tokens
  mountPath: /etc/meshcast/tokens
  readOnly: true
{{- end }}
{{- end }}
{{- if $v.monitoring.metricsWebConfig.enabled }}
- name: metrics-web-config
  mountPath: /etc/meshcast/metrics
  readOnly: true
{{- if $v.monitoring.metricsWebConfig.tlsSecretName }}
- name: metrics-tls
  mountPath: /etc/meshcast/metrics-tls
  readOnly: true
{{- end }}
{{- end }}
{{- end }}

{{/* Volumes for meshcast.secretMounts; .secretName is the TLS Secret. */}}
{{- define "meshcast.secretVolumes" -}}
{{- $v := .root.Values -}}
{{- if $v.tls.enabled }}
- name: tls
  secret:
    secretName: {{ .secretName }}
    defaultMode: 0440
{{- if and (eq .component "controller") $v.tls.tokens.enabled }}
- name: tokens-secret
  secret:
    secretName: {{ $v.tls.tokens.secretName }}
    defaultMode: 0440
- name: tokens
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- end }}
{{- end }}
{{- if $v.monitoring.metricsWebConfig.enabled }}
- name: metrics-web-config
  secret:
    secretName: {{ $v.monitoring.metricsWebConfig.secretName }}
    defaultMode: 0440
{{- with $v.monitoring.metricsWebConfig.tlsSecretName }}
- name: metrics-tls
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}
{{- end }}
{{- end }}

{{/* The worker Secret of one node. */}}
{{- define "meshcast.workerSecretName" -}}
{{- printf "%s-%s" .root.Values.tls.workerSecretPrefix .node | trunc 253 }}
{{- end }}

{{/*
Init container of the controller: copies the tokens file from its Secret
into a memory emptyDir as a mode-0600 file owned by the daemon's user. The
controller refuses a tokens file that group or others may read (as ssh does
a private key), and a Secret volume cannot give that: its files belong to
root, and with fsGroup the kubelet makes them group-readable.
*/}}
{{- define "meshcast.tokensInit" -}}
{{- $v := .Values -}}
{{- if and $v.tls.enabled $v.tls.tokens.enabled -}}
initContainers:
  - name: tokens
    image: {{ include "meshcast.image" (dict "root" . "image" $v.controller.image) | quote }}
    imagePullPolicy: {{ $v.controller.image.pullPolicy }}
    command: ["install", "-m", "0600", "/etc/meshcast/tokens-secret/{{ $v.tls.tokens.key }}", "/etc/meshcast/tokens/{{ $v.tls.tokens.key }}"]
    resources:
      requests:
        cpu: 10m
        memory: 16Mi
      limits:
        memory: 64Mi
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities:
        drop: ["ALL"]
    volumeMounts:
      - name: tokens-secret
        mountPath: /etc/meshcast/tokens-secret
        readOnly: true
      - name: tokens
        mountPath: /etc/meshcast/tokens
{{- end }}
{{- end }}
