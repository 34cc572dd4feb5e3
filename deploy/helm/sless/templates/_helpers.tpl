{{/* The components and their ops ports. */}}
{{- define "sless.components" -}}
gateway: 9090
builder: 9091
operator: 9092
invoker: 9093
scheduler: 9094
{{- end -}}

{{- define "sless.fullname" -}}
{{- printf "%s-%s" .root.Release.Name .name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sless.labels" -}}
app.kubernetes.io/name: sless
app.kubernetes.io/part-of: sless
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "sless.selector" -}}
app.kubernetes.io/part-of: sless
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .name }}
{{- end -}}

{{- define "sless.image" -}}
{{- printf "%s/%s@%s" .root.Values.image.repository .name (index .root.Values.image.digests .name) -}}
{{- end -}}

{{/* The hardened security context of every sless container. */}}
{{- define "sless.podSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}
{{- define "sless.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Environment every component shares. */}}
{{- define "sless.env" -}}
- name: LOG_LEVEL
  value: {{ .root.Values.logLevel | quote }}
- name: SLESS_OPS_ADDR
  value: ":{{ .port }}"
- name: SLESS_DRAIN_DELAY
  value: "5s"
- name: SLESS_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
- name: SLESS_MIGRATE
  value: "false"
- name: SLESS_RABBITMQ_URL
  valueFrom: {secretKeyRef: {name: {{ .root.Values.rabbitmq.existingSecret }}, key: {{ .root.Values.rabbitmq.urlKey }}}}
{{- with .root.Values.otel.endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- /* The operator deletes a deleted tenant's rows. */}}
{{- if has .name (list "gateway" "builder" "operator" "invoker" "scheduler") }}
- name: SLESS_POSTGRES_URL
  valueFrom: {secretKeyRef: {name: {{ .root.Values.postgres.existingSecret }}, key: {{ .root.Values.postgres.urlKey }}}}
{{- end }}
{{- if has .name (list "gateway" "builder" "operator" "invoker") }}
- name: SLESS_S3_ENDPOINT
  value: {{ .root.Values.s3.endpoint | quote }}
- name: SLESS_S3_BUCKET
  value: {{ .root.Values.s3.bucket | quote }}
- name: SLESS_S3_SECURE
  value: {{ .root.Values.s3.secure | quote }}
- name: SLESS_S3_ACCESS_KEY
  valueFrom: {secretKeyRef: {name: {{ .root.Values.s3.existingSecret }}, key: SLESS_S3_ACCESS_KEY}}
- name: SLESS_S3_SECRET_KEY
  valueFrom: {secretKeyRef: {name: {{ .root.Values.s3.existingSecret }}, key: SLESS_S3_SECRET_KEY}}
{{- end }}
{{- end -}}

{{/* Egress to the cluster DNS. */}}
{{- define "sless.dnsEgress" -}}
- to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}, podSelector: {matchLabels: {k8s-app: kube-dns}}}]
  ports: [{port: 53, protocol: UDP}, {port: 53, protocol: TCP}]
{{- end }}

{{/*
The public addresses, as pkg/egress judges them (egress.PublicBlocks:
0.0.0.0/0 and 2000::/3, each less the ranges egress refuses in it), less
the ranges of the list given (the cluster's), as ipBlock peers.
TestPublicEgressIsPkgEgress checks that the two agree.
*/}}
{{- define "sless.publicBlocks" -}}
{{- $v4 := list "0.0.0.0/8" "10.0.0.0/8" "100.64.0.0/10" "127.0.0.0/8" "169.254.0.0/16" "172.16.0.0/12" "192.0.0.0/24" "192.0.2.0/24" "192.88.99.0/24" "192.168.0.0/16" "198.18.0.0/15" "198.51.100.0/24" "203.0.113.0/24" "224.0.0.0/4" "240.0.0.0/4" }}
{{- $v6 := list "2001::/23" "2001:db8::/32" "2002::/16" "3fff::/20" }}
{{- range . }}
{{- if contains "." . }}{{ if not (has . $v4) }}{{ $v4 = append $v4 . }}{{ end }}
{{- else if regexMatch "^[23][0-9a-fA-F]{3}:" . }}{{ $v6 = append $v6 . }}{{ end }}
{{- end }}
- ipBlock: {cidr: 0.0.0.0/0, except: {{ $v4 | toJson }}}
- ipBlock: {cidr: "2000::/3", except: {{ $v6 | toJson }}}
{{- end }}

{{/*
Egress rules from a list of {cidrs, except, ports} or {public: true, ports}
(the public addresses of sless.publicBlocks, less the cluster ranges);
called with (dict "rules" LIST "clusterCIDRs" LIST).
*/}}
{{- define "sless.egressRules" -}}
{{- $cluster := .clusterCIDRs }}
{{- range .rules }}
- to:
    {{- if .public }}
    {{- include "sless.publicBlocks" $cluster | trim | nindent 4 }}
    {{- end }}
    {{- $except := .except }}
    {{- range .cidrs }}
    - ipBlock: {cidr: {{ . | quote }}{{ with $except }}, except: [{{ range $i, $e := . }}{{ if $i }}, {{ end }}{{ $e | quote }}{{ end }}]{{ end }}}
    {{- end }}
  {{- with .ports }}
  ports: [{{ range $i, $p := . }}{{ if $i }}, {{ end }}{port: {{ $p }}, protocol: TCP}{{ end }}]
  {{- end }}
{{- end }}
{{- end }}
