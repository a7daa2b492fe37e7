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

{{/* The pools the standalone gateway serves: `pools` (several behind one Envoy, each named),
or the one `pool` with no name (nothing of its configuration changes). Returned as JSON. */}}
{{- define "wasm-epp.servedPools" -}}
{{- if .Values.pools -}}
{{- $seen := dict -}}
{{- range .Values.pools -}}
{{- if hasKey $seen .name }}{{ fail (printf "pools: %s is named twice" .name) }}{{ end -}}
{{- $_ := set $seen .name true -}}
{{- end -}}
{{- toJson .Values.pools -}}
{{- else -}}
{{- toJson (list (merge (dict "name" "") .Values.pool)) -}}
{{- end -}}
{{- end }}

{{/* The singleton's `kubernetes` section: the pool (`pool`, default the `pool` value), by
label selector or InferencePool. */}}
{{- define "wasm-epp.poolDiscovery" -}}
{{- $values := .pool | default .root.Values.pool -}}
{{- $pool := dict "cluster" .cluster "authority" "kubernetes.default.svc" "namespace" (include "wasm-epp.poolNamespace" .root) "relist_interval_ms" .root.Values.pool.relistIntervalMs -}}
{{- if $values.inferencePool -}}
{{- $_ := set $pool "inference_pool" $values.inferencePool -}}
{{- if $values.targetPort }}{{ $_ := set $pool "target_port" $values.targetPort }}{{ end -}}
{{- else -}}
{{- if not $values.labelSelector }}{{ fail (printf "%s: set labelSelector or inferencePool" (ternary (printf "pools %s" $values.name) "pool" (not (empty $values.name)))) }}{{ end -}}
{{- /* The one `pool` defaults to vLLM's port; each of several `pools` names its own. */ -}}
{{- $port := $values.targetPort | default (ternary 0 8000 (not (empty $values.name))) -}}
{{- if not $port }}{{ fail (printf "%s: labelSelector needs targetPort" (ternary (printf "pools %s" $values.name) "pool" (not (empty $values.name)))) }}{{ end -}}
{{- $_ := set $pool "label_selector" $values.labelSelector -}}
{{- $_ := set $pool "target_port" $port -}}
{{- end -}}
{{- toJson $pool -}}
{{- end }}

{{/* The singleton's configuration (JSON); `peers` and `podsApiKey` only for the standalone gateway. With
several pools, `pool` is the one this singleton serves: its name labels its stats and its
peer messages go to its own path. */}}
{{- define "wasm-epp.singletonConfig" -}}
{{- /* The user's `singleton` values first: what the chart sets below replaces theirs. */ -}}
{{- $config := deepCopy (.root.Values.singleton | default dict) -}}
{{- $_ := set $config "kubernetes" (include "wasm-epp.poolDiscovery" (dict "root" .root "cluster" .cluster "pool" .pool) | fromJson) -}}
{{- $_ := set $config "poll_interval_ms" .root.Values.pollIntervalMs -}}
{{- /* Model lists are fetched at most as often as the scrapes (the plugin refuses a shorter
models_interval_ms than poll_interval_ms): its 5 s default, or each scrape past that. */ -}}
{{- if gt (int64 .root.Values.pollIntervalMs) 5000 }}{{ $_ := set $config "models_interval_ms" .root.Values.pollIntervalMs }}{{ end -}}
{{- if .metricsCluster -}}
{{- $_ := set $config "metrics_cluster" .metricsCluster -}}
{{- end -}}
{{- $name := (.pool | default dict).name | default "" -}}
{{- if $name -}}
{{- $_ := set $config "pool_name" $name -}}
{{- end -}}
{{- if .podsApiKey -}}
{{- /* The variable's name, never the key: Envoy's config_dump shows this JSON. */ -}}
{{- $_ := set $config "pods_api_key_env" (include "wasm-epp.podsApiKeyEnv" .root) -}}
{{- if .root.Values.podsApiKey.onMetrics }}{{ $_ := set $config "pods_api_key_on_metrics" true }}{{ end -}}
{{- end -}}
{{- if .peers -}}
{{- /* Peers drop a replica's load 2 s after its last message, and the singleton sends on its
polls: the plugin refuses a cadence over 1 s at start (docs/configuration.md, `peers`). */ -}}
{{- if gt (int .root.Values.pollIntervalMs) 1000 }}{{ fail (printf "pollIntervalMs: %v is over 1000 with peers enabled (peers would see this replica's load only now and then); lower it or set peers.enabled=false" .root.Values.pollIntervalMs) }}{{ end -}}
{{- $selector := printf "app.kubernetes.io/name=%s" .root.Values.name -}}
{{- $discovery := dict "cluster" .cluster "authority" "kubernetes.default.svc" "namespace" .root.Release.Namespace "label_selector" $selector "target_port" .root.Values.peers.port "relist_interval_ms" 5000 -}}
{{- $peers := dict "kubernetes" $discovery "secret" "__WASM_EPP_PEER_SECRET__" -}}
{{- if $name }}{{ $_ := set $peers "path" (include "wasm-epp.peerPath" $name) }}{{ end -}}
{{- $_ := set $config "peers" $peers -}}
{{- end -}}
{{- toPrettyJson $config -}}
{{- end }}

{{/* The Envoy container's environment variable holding the pods' API key (podsApiKey),
which Envoy hands to the singletons' VMs (vm_config.environment_variables.host_env_keys). */}}
{{- define "wasm-epp.podsApiKeyEnv" -}}
WASM_EPP_PODS_API_KEY
{{- end }}

{{/* Where a named pool's peer messages go on the peer listener. */}}
{{- define "wasm-epp.peerPath" -}}
/wasm-epp/v1/peer/{{ . }}
{{- end }}

{{/* The filter's configuration (JSON): the user's `filter` values, plus what the mode needs
(and, with several pools, the pool's name as `poolName` and its own `filter` values as
`poolFilter`, merged over the shared ones). */}}
{{- define "wasm-epp.filterConfig" -}}
{{- $root := .root | default . -}}
{{- $config := mergeOverwrite (deepCopy $root.Values.filter) (deepCopy (.poolFilter | default dict)) -}}
{{- /* The pool clusters, the header strip and the access log name the protocol's header: a
filter writing another would have every request reach its cluster without a destination. */ -}}
{{- $header := $config.destination_header | default "x-gateway-destination-endpoint" -}}
{{- if ne $header "x-gateway-destination-endpoint" -}}
{{- fail (printf "%sfilter.destination_header: %s: the chart's pool clusters follow x-gateway-destination-endpoint (every request would be answered 503); leave it out" (ternary (printf "pools %s: " .poolName) "" (not (empty .poolName))) $header) -}}
{{- end -}}
{{- /* Pod data older than stale_after_ms is not trusted: scraped less often, every pod goes
stale before its next scrape and picks fail open between scrapes (the plugin warns). */ -}}
{{- $stale := $config.stale_after_ms | default 5000 -}}
{{- if ge (int64 $root.Values.pollIntervalMs) (int64 $stale) -}}
{{- fail (printf "pollIntervalMs: %v is not below %sfilter.stale_after_ms (%v): each pod's data would go stale before its next scrape and routing would fail open between scrapes; raise stale_after_ms" $root.Values.pollIntervalMs (ternary (printf "pools %s: " .poolName) "" (not (empty .poolName))) $stale) -}}
{{- end -}}
{{- /* A request waiting in flow control's queue is still being received for Envoy: the
inference listener's request_timeout (60 s) cuts it with a 408 before a TTL as long. */ -}}
{{- $flow := $config.flow_control | default dict -}}
{{- if $flow.enabled -}}
{{- range $field, $default := dict "ttl_ms" 30000 "sheddable_ttl_ms" 5000 -}}
{{- $ttl := get $flow $field | default $default -}}
{{- if ge (int64 $ttl) 60000 -}}
{{- fail (printf "%sfilter.flow_control.%s: %v is not below the inference listener's request_timeout (60 s), which also runs while a request waits: it would get Envoy's 408 instead of its TTL's 429" (ternary (printf "pools %s: " $.poolName) "" (not (empty $.poolName))) $field $ttl) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $_ := set $config "fallback_destinations" 0 -}}
{{- if .poolName }}{{ $_ := set $config "pool_name" .poolName }}{{ end -}}
{{- toJson $config -}}
{{- end }}

{{/* Subset hint headers other than the protocol's that some pool's filter reads
(models.subset_header): the listener strips client copies of each, as it does the
protocol's, or a client could narrow its own pick to the pod it names. One per line. */}}
{{- define "wasm-epp.extraSubsetHeaders" -}}
{{- $seen := dict "x-gateway-destination-endpoint-subset" true -}}
{{- range (include "wasm-epp.servedPools" . | fromJsonArray) -}}
{{- $config := include "wasm-epp.filterConfig" (dict "root" $ "poolFilter" .filter "poolName" .name) | fromJson -}}
{{- $header := (($config.models | default dict).subset_header | default "x-gateway-destination-endpoint-subset") | lower -}}
{{- if not (hasKey $seen $header) }}
{{ $header }}
{{- $_ := set $seen $header true -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The inference listener's per_connection_buffer_limit_bytes: 16 MiB, or more where a
pool's filter reads larger bodies. The filter buffers a body up to its max_body_bytes
(plugin default 4 MiB) and Envoy answers 413 to one that outgrows the listener's limit
first, so the limit stays 1 MiB above the largest max_body_bytes (the chunk that carries a
body past it is buffered before the filter stops reading). */}}
{{- define "wasm-epp.listenerBufferBytes" -}}
{{- $limit := 16777216 -}}
{{- range (include "wasm-epp.servedPools" . | fromJsonArray) -}}
{{- $config := include "wasm-epp.filterConfig" (dict "root" $ "poolFilter" .filter "poolName" .name) | fromJson -}}
{{- if hasKey $config "max_body_bytes" -}}
{{- $limit = max $limit (add (int64 $config.max_body_bytes) 1048576) -}}
{{- end -}}
{{- end -}}
{{- $limit -}}
{{- end }}

{{/* A pool route's request_body_buffer_limit (Envoy 1.37 and later honour it while a filter
holds the request), given the chart's root and the pool's own `filter` values. The body is
buffered until the pod is picked, and Envoy adds each read of the connection (up to the
listener's per_connection_buffer_limit_bytes) to that buffer before the filter sees it, so
the route holds the pool's max_body_bytes (plugin default 4 MiB), one whole read and 1 MiB;
with less, a body without a length can get Envoy's 413 below max_body_bytes. */}}
{{- define "wasm-epp.requestBodyBufferLimit" -}}
{{- $config := include "wasm-epp.filterConfig" (dict "root" .root "poolFilter" .poolFilter) | fromJson -}}
{{- $body := 4194304 -}}
{{- if hasKey $config "max_body_bytes" }}{{ $body = int64 $config.max_body_bytes }}{{ end -}}
{{- add $body (include "wasm-epp.listenerBufferBytes" .root | int64) 1048576 -}}
{{- end }}

{{/* Istio: the connection manager settings merged into each inference listener's
(k8s/istio/singleton/envoyfilter.yaml, patch 4). */}}
{{- define "wasm-epp.istioConnectionManager" -}}
name: envoy.filters.network.http_connection_manager
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
  # Old clients still speak HTTP/1.0; HTTP/2 (h2c) is negotiated by AUTO.
  http_protocol_options: { accept_http_10: true }
  http2_protocol_options: { max_concurrent_streams: 128 }
  common_http_protocol_options: { max_requests_per_connection: 1000 }
  request_timeout: 60s
  request_headers_timeout: 10s
  use_remote_address: true
  xff_num_trusted_hops: 0
  internal_address_config:
    unix_sockets: false
    cidr_ranges: [{ address_prefix: 0.0.0.0, prefix_len: 32 }]
  # Envoy's own failures (no pod reachable, timeouts, a body too large) in OpenAI's error shape, as in
  # envoy/envoy.yaml.template (docs/configuration.md).
  local_reply_config:
    mappers:
      - filter:
          response_flag_filter: { flags: [UF, URX, UH, NR, UO, UT, UC, DC, SI] }
        body_format_override:
          json_format:
            error:
              message: "%LOCAL_REPLY_BODY%"
              type: upstream_unavailable
              code: "%RESPONSE_CODE%"
              flags: "%RESPONSE_FLAGS%"
      # A body that outgrows per_connection_buffer_limit_bytes while it is buffered:
      # Envoy's 413, which carries no response flag.
      - filter:
          status_code_filter: { comparison: { op: EQ, value: { default_value: 413, runtime_key: wasm_epp.local_reply_413 } } }
        body_format_override:
          json_format:
            error:
              message: "%LOCAL_REPLY_BODY%"
              type: invalid_request_error
              code: "%RESPONSE_CODE%"
{{- end }}

{{/* Istio: the router of the gateway listener on this port, which the HTTP filters are
inserted before. */}}
{{- define "wasm-epp.istioRouterMatch" -}}
context: GATEWAY
listener:
  portNumber: {{ . }}
  filterChain:
    filter:
      name: envoy.filters.network.http_connection_manager
      subFilter: { name: envoy.filters.http.router }
{{- end }}

{{/* The pool whose filter answers the liveness probe on the metrics listener: the one
`pool`, or the first of several `pools` (each pool's filter runs in its own VM; the probe
checks the first's). Returned as JSON: the pool and its vm_id suffix. */}}
{{- define "wasm-epp.healthPool" -}}
{{- $pool := include "wasm-epp.servedPools" . | fromJsonArray | first -}}
{{- toJson (dict "pool" $pool "suffix" (ternary (printf "-%s" ($pool.name | default "")) "" (not (empty $pool.name))) "filter" .Values.filter) -}}
{{- end }}

{{/* The health path the probed filter answers (its `health_path`, default the plugin's). */}}
{{- define "wasm-epp.healthPath" -}}
{{- $pool := .pool.filter | default dict -}}
{{- $pool.health_path | default .filter.health_path | default "/wasm-epp/healthz" -}}
{{- end }}
