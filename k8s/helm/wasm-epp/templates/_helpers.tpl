{{/* Shared pieces of the wasm-epp chart. */}}

{{- define "wasm-epp.labels" -}}
app.kubernetes.io/name: {{ .Values.name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- define "wasm-epp.poolNamespace" -}}
{{ .Values.pool.namespace | default .Release.Namespace }}
{{- end }}

{{- define "wasm-epp.peerSecretName" -}}
{{ .Values.peers.existingSecret | default (printf "%s-peer-secret" .Values.name) }}
{{- end }}

{{/* The singleton's `kubernetes` section: the pool, by label selector or InferencePool. */}}
{{- define "wasm-epp.poolDiscovery" -}}
{{- $pool := dict "cluster" .cluster "authority" "kubernetes.default.svc" "namespace" (include "wasm-epp.poolNamespace" .root) "relist_interval_ms" .root.Values.pool.relistIntervalMs -}}
{{- if .root.Values.pool.inferencePool -}}
{{- $_ := set $pool "inference_pool" .root.Values.pool.inferencePool -}}
{{- if .root.Values.pool.targetPort }}{{ $_ := set $pool "target_port" .root.Values.pool.targetPort }}{{ end -}}
{{- else -}}
{{- if not .root.Values.pool.labelSelector }}{{ fail "pool: set labelSelector or inferencePool" }}{{ end -}}
{{- $_ := set $pool "label_selector" .root.Values.pool.labelSelector -}}
{{- $_ := set $pool "target_port" .root.Values.pool.targetPort -}}
{{- end -}}
{{- toJson $pool -}}
{{- end }}

{{/* The singleton's configuration (JSON); `peers` only for the standalone gateway. */}}
{{- define "wasm-epp.singletonConfig" -}}
{{- $config := dict "kubernetes" (include "wasm-epp.poolDiscovery" (dict "root" .root "cluster" .cluster) | fromJson) "poll_interval_ms" .root.Values.pollIntervalMs -}}
{{- if .metricsCluster -}}
{{- $_ := set $config "metrics_cluster" .metricsCluster -}}
{{- end -}}
{{- if .peers -}}
{{- $selector := printf "app.kubernetes.io/name=%s" .root.Values.name -}}
{{- $discovery := dict "cluster" .cluster "authority" "kubernetes.default.svc" "namespace" .root.Release.Namespace "label_selector" $selector "target_port" .root.Values.peers.port "relist_interval_ms" 5000 -}}
{{- $_ := set $config "peers" (dict "kubernetes" $discovery "secret" "__WASM_EPP_PEER_SECRET__") -}}
{{- end -}}
{{- toPrettyJson $config -}}
{{- end }}

{{/* The filter's configuration (JSON): the user's `filter` values, plus what the mode needs. */}}
{{- define "wasm-epp.filterConfig" -}}
{{- $config := deepCopy .Values.filter -}}
{{- $_ := set $config "fallback_destinations" 0 -}}
{{- toJson $config -}}
{{- end }}
