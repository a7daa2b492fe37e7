"""envoy/envoy.yaml.template rendered as the launcher renders it (launcher/src/render.rs),
for validate.py: placeholders filled, sections a setup does not use dropped, and a pool's
sections (singleton, filter, route, cluster, peer route and receiver) written once per pool.
validate.py's check_renderers_agree compares its two-pool render with the launcher's
(the committed envoy/examples/two-pools.yaml, which a launcher test keeps current)."""

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]

PEER_SECRET = "validate-peer-secret-0123"

PER_POOL_SECTIONS = ("singleton_entry", "inline_filter", "pool_route", "override_host", "original_dst",
                     "peer_route", "peer_filter")


def pool_values(name, pool, cluster_mode, several, peers):
    """One pool's placeholders, as launcher/src/render.rs fills them."""
    suffix = f"-{name}" if several else ""
    filter_name = f"wasm-epp{suffix}" if several else "envoy.filters.http.wasm"
    filter_config = {"pool": pool, **({"pool_name": name} if several else {})}
    poller_config = dict(filter_config)
    peer_path = f"/wasm-epp/v1/peer/{name}" if several else "/wasm-epp/v1/peer"
    peer_filter_name = f"wasm-epp-peer{suffix}" if several else "envoy.filters.http.wasm"
    if peers:
        poller_config["peers"] = {"peers": ["127.0.0.1:10001", "127.0.0.1:10002"], "secret": PEER_SECRET,
                                  "path": peer_path}
    if cluster_mode == "original_dst":
        filter_config["fallback_destinations"] = 0
    match = {"prefix": "/", "headers": [{"name": "x-pool", "string_match": {"exact": name}}]} if several else None
    return {
        "POOL_SUFFIX": suffix, "HTTP_FILTER_NAME": filter_name,
        "FILTER_DISABLED": "disabled: true" if several else "",
        "ROUTE_ENABLES_FILTER": (f'typed_per_filter_config: {{ {filter_name}: {{ "@type": '
                                 'type.googleapis.com/envoy.config.route.v3.FilterConfig, config: {} } }')
        if several else "",
        "ROUTE_MATCH": json.dumps(match) if match else '{ prefix: "/" }',
        # The filter's max_body_bytes, one whole read of the 16 MiB listener and 1 MiB.
        "REQUEST_BODY_BUFFER_LIMIT": str(filter_config.get("max_body_bytes", 4 << 20) + (16 << 20) + (1 << 20)),
        "PEER_ROUTE_MATCH": json.dumps({"path_separated_prefix": peer_path}) if several else '{ prefix: "/" }',
        "PEER_ROUTE_ENABLES_FILTER": (f'typed_per_filter_config: {{ {peer_filter_name}: {{ "@type": '
                                      'type.googleapis.com/envoy.config.route.v3.FilterConfig, config: {} } }')
        if several else "",
        "PEER_HTTP_FILTER_NAME": peer_filter_name,
        "PEER_FILTER_CONFIG": json.dumps({"peer_receiver": {"secret": PEER_SECRET, "path": peer_path},
                                          **({"pool_name": name} if several else {})}),
        "FILTER_CONFIG": json.dumps(filter_config), "POLLER_CONFIG": json.dumps(poller_config),
        "POOL_ENDPOINTS": "\n".join(
            f'              - endpoint: {{ address: {{ socket_address: {{ address: "{a.split(":")[0]}", '
            f'port_value: {a.split(":")[1]} }} }} }}' for a in pool),
    }


def fill(lines, values):
    """`lines` with `values` filled in; a line of only a placeholder that renders empty goes."""
    out = []
    for line in lines:
        filled = line
        for name, value in values.items():
            filled = filled.replace("{{" + name + "}}", value)
        if re.fullmatch(r"\s*\{\{[A-Z_]+\}\}\s*", line) and not filled.strip():
            continue
        out.append(filled)
    return out


def render(cluster_mode, singleton, peers=False, pools=None):
    """The template for one setup; `pools` ({name: pods}) renders several pools behind one
    Envoy. Returns (the parsed configuration, placeholders it did not know)."""
    sections = {"singleton": singleton, "singleton_entry": singleton, "override_host": cluster_mode == "override_host",
                "original_dst": cluster_mode == "original_dst", "peers": peers, "peer_route": peers,
                "peer_filter": peers, "live_filter": False,
                "filters_before_plugin": False}
    several = bool(pools)
    pools = pools or {"": ["127.0.0.1:8001", "127.0.0.1:8002"]}
    per_pool = [pool_values(name, pods, cluster_mode, several, peers) for name, pods in pools.items()]
    kept, section = [], None
    for line in (ROOT / "envoy/envoy.yaml.template").read_text().splitlines():
        marker = re.match(r"^\s*# (BEGIN|END) (\S+)\s*$", line)
        if marker and marker.group(1) == "BEGIN":
            section = (marker.group(2), [])
        elif marker:
            name, lines = section
            section = None
            if sections.get(name, True):
                for values in (per_pool if name in PER_POOL_SECTIONS else [{}]):
                    kept += fill(lines, values)
        elif section:
            section[1].append(line)
        else:
            kept.append(line)
    values = {
        "ADMIN_ADDRESS": "127.0.0.1", "ADMIN_PORT": "9901", "LISTEN_ADDRESS": "127.0.0.1", "LISTEN_PORT": "10000",
        "FILTER_WASM": "/etc/wasm-epp/wasm_epp_filter.wasm", "SINGLETON_WASM": "/etc/wasm-epp/wasm_epp_shared_state.wasm",
        "PEER_ADDRESS": "127.0.0.1", "PEER_PORT": "10001",
        "PER_TRY_IDLE_TIMEOUT": "0s", "ROUTE_IDLE_TIMEOUT": "660s", "FAILURE_POLICY": "FAIL_RELOAD", "REQUEST_TIMEOUT": "60s",
        # An ORIGINAL_DST pool follows one address: a retry would hit the same pod.
        "NUM_RETRIES": "0" if cluster_mode == "original_dst" else "2",
        "DESTINATION_HEADER": "x-gateway-destination-endpoint", "MAX_HEAP_BYTES": "1073741824",
        "MAX_CONNECTIONS": "10000", "ASYNC_RESPONSE_LIMIT_BYTES": "4194304", "ACCESS_LOG_PATH": "/dev/stdout",
    }
    text = "\n".join(kept) + "\n"
    for name, value in values.items():
        text = text.replace("{{" + name + "}}", value)
    left = sorted(set(re.findall(r"\{\{([A-Z_]+)\}\}", text)))
    return yaml.safe_load(text), left
