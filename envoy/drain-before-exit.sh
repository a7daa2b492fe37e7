#!/usr/bin/env bash
# Drains Envoy before it is stopped, so a rollout or scale-down loses no request.
#
# Envoy exits at once on SIGTERM and cuts every request in flight, and a generation may
# stream for minutes. Run this before the SIGTERM (a Kubernetes preStop hook, a systemd
# ExecStop= ahead of the kill): it fails Envoy's health check and drains its listeners
# (every response after that closes its connection, HTTP/2 connections get GOAWAY; start
# Envoy with `--drain-strategy immediate` so this holds from the first response, not
# gradually over --drain-time-s), waits DRAIN_MIN_SECONDS for load balancers to stop sending
# new connections, then until no request is in flight on the inference listener or
# DRAIN_MAX_SECONDS have passed since it started. Exits 0 when drained, 1 at the deadline
# with requests still in flight, 2 if the admin interface never answered.
#
# Needs only bash (its /dev/tcp) and sleep: Envoy's images have no curl or wget.
#
# Environment (defaults):
#   ENVOY_ADMIN        127.0.0.1:9901   Envoy's admin address (host:port, [IPv6]:port)
#   DRAIN_MIN_SECONDS  5                 the least time to keep serving after the drain starts
#   DRAIN_MAX_SECONDS  110               give up waiting after this (below the pod's grace period)
#   DRAIN_STAT         http.inference.downstream_rq_active   the in-flight gauge to wait on
#
# docs/deployment.md, "Rollouts without lost requests"; tests/e2e/tests/graceful_drain.rs.

set -u

admin="${ENVOY_ADMIN:-127.0.0.1:9901}"
min_seconds="${DRAIN_MIN_SECONDS:-5}"
max_seconds="${DRAIN_MAX_SECONDS:-110}"
stat="${DRAIN_STAT:-http.inference.downstream_rq_active}"
host="${admin%:*}"
host="${host#[}"
host="${host%]}"
port="${admin##*:}"

log() {
    echo "wasm-epp drain: $*" >&2
}

# One HTTP/1.1 request to the admin interface; prints the response body, fails if the
# connection cannot be made or the status is not 200.
admin_request() {
    local method="$1" path="$2" line status="" body="" in_body=0
    exec 3<>"/dev/tcp/$host/$port" || return 1
    printf '%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nContent-Length: 0\r\n\r\n' \
        "$method" "$path" "$admin" >&3
    # An admin that stops answering must not hold the hook until the grace period ends.
    while IFS= read -r -t 5 line <&3 || [[ -n "$line" ]]; do
        line="${line%$'\r'}"
        if [[ -z "$status" ]]; then
            status="${line#HTTP/* }"
            status="${status%% *}"
        elif ((in_body)); then
            body+="$line"$'\n'
        elif [[ -z "$line" ]]; then
            in_body=1
        fi
    done
    exec 3<&-
    printf '%s' "$body"
    [[ "$status" == 200 ]]
}

# Requests in flight on the inference listener, or nothing if the admin did not answer.
# (No here-strings: bash may back them with a temporary file, and the container's root
# file system is read-only.)
in_flight() {
    local stats pattern
    stats="$(admin_request GET "/stats?usedonly&filter=$stat")" || return 1
    pattern="(^|"$'\n'")${stat//./\\.}: ([0-9]+)"
    if [[ "$stats" =~ $pattern ]]; then
        printf '%s' "${BASH_REMATCH[2]}"
    else
        printf '0'
    fi
}

started=$SECONDS
if ! admin_request POST /healthcheck/fail >/dev/null; then
    log "the admin interface on $admin did not answer; nothing drained"
    exit 2
fi
if ! admin_request POST '/drain_listeners?graceful' >/dev/null; then
    log "health check failed, but the admin on $admin refused to drain the listeners"
    exit 2
fi
log "draining (health check failed, listeners draining); serving for at least ${min_seconds}s"
sleep "$min_seconds"

# Twice 0 in a row, a second apart: a request that arrives between two looks still counts.
zeros=0
count="?"
while ((SECONDS - started < max_seconds)); do
    count="$(in_flight)" || count="?"
    if [[ "$count" == 0 ]]; then
        zeros=$((zeros + 1))
        if ((zeros >= 2)); then
            log "drained after $((SECONDS - started))s"
            exit 0
        fi
    else
        zeros=0
    fi
    sleep 1
done
log "${count} request(s) still in flight after ${max_seconds}s; stopping anyway"
exit 1
