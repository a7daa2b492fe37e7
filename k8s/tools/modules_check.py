"""The module ConfigMaps are gzip-compressed (k8s/tools/wasm-configmaps.py): every pod that
mounts them must unpack them with an init container into the folder Envoy reads, and that
init container's script, run here with /bin/sh on the generated ConfigMaps, must give the
built modules back byte for byte and fail when a module is missing. Run by validate.py."""

import base64
import re
import subprocess
import tempfile
from pathlib import Path

wasm_configmaps = __import__("wasm-configmaps")


def dig(doc, *keys):
    for key in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


# Where every Envoy configuration here loads the modules from.
ENVOY_WASM_DIR = "/etc/wasm-epp"


def unpack_steps(where, deployment, fail):
    """The pod template mounting the module ConfigMaps (gzip-compressed) must unpack them:
    an init container mounts them, runs `gzip -dc` over every module, and writes into a
    volume the other containers mount at ENVOY_WASM_DIR; no container but it mounts the
    packed files. Returns [(script, packed folder, unpacked folder)] to run."""
    spec = dig(deployment, "spec", "template", "spec") or {}
    packed = set()
    for volume in spec.get("volumes") or []:
        names = [dig(volume, "configMap", "name")]
        names += [dig(s, "configMap", "name") for s in dig(volume, "projected", "sources") or []]
        if any(name in wasm_configmaps.MODULES for name in names):
            packed.add(volume.get("name"))
    if not packed:
        return []
    emptydirs = {v.get("name") for v in spec.get("volumes") or [] if "emptyDir" in v}
    containers = spec.get("containers") or []
    for container in containers:
        for mount in container.get("volumeMounts") or []:
            if mount.get("name") in packed:
                fail(where, f"container {container.get('name')} mounts the gzip-compressed modules "
                            f"({mount.get('name')}); Envoy must read the ones an init container unpacks")
    steps = []
    for init in spec.get("initContainers") or []:
        mounts = init.get("volumeMounts") or []
        sources = [m for m in mounts if m.get("name") in packed]
        if not sources:
            continue
        script = "\n".join((init.get("command") or [])[2:] + (init.get("args") or []))
        if (init.get("command") or [])[:2] != ["sh", "-c"] or "gzip -dc" not in script:
            fail(where, f"init container {init.get('name')} mounts the module ConfigMaps but does not "
                        f"run `gzip -dc` over them with sh -c")
            continue
        for module in wasm_configmaps.MODULES.values():
            if module not in script:
                fail(where, f"init container {init.get('name')} does not unpack {module}")
        targets = [m for m in mounts if m.get("name") in emptydirs and not m.get("readOnly")
                   and m.get("mountPath") == ENVOY_WASM_DIR]
        if not targets:
            fail(where, f"init container {init.get('name')} does not write into an emptyDir at {ENVOY_WASM_DIR}")
            continue
        target = targets[0]
        readers = [c.get("name") for c in containers for m in c.get("volumeMounts") or []
                   if m.get("name") == target.get("name") and m.get("mountPath") == ENVOY_WASM_DIR]
        if not readers:
            fail(where, f"no container mounts {target.get('name')} (the unpacked modules) at {ENVOY_WASM_DIR}")
        steps.append((script, sources[0].get("mountPath"), ENVOY_WASM_DIR))
    if not steps:
        fail(where, f"mounts the module ConfigMaps ({', '.join(sorted(packed))}) but no init container unpacks them")
    return steps


def check(deployments, configmaps, wasm_dir, fail):
    """unpack_steps for every Deployment, then each distinct unpack script run with /bin/sh
    (its folders moved into a scratch folder) on the packed files of the generated ConfigMaps:
    it must write the modules byte for byte, and fail when a module is missing. Returns how
    many distinct scripts ran."""
    steps = {}
    for where, deployment in deployments:
        for step in unpack_steps(where, deployment, fail):
            steps.setdefault(step, []).append(where)
    packed = {key: base64.b64decode(value) for doc in configmaps if doc.get("kind") == "ConfigMap"
              for key, value in (doc.get("binaryData") or {}).items()}
    if not all(f"{module}.gz" in packed for module in wasm_configmaps.MODULES.values()):
        return 0  # reported by validate.py's check_wasm_configmaps
    modules = {module: (Path(wasm_dir) / module).read_bytes() for module in wasm_configmaps.MODULES.values()}
    for (script, source, target), users in steps.items():
        where = f"unpack script of {users[0]}" + (f" (and {len(users) - 1} more)" if len(users) > 1 else "")
        with tempfile.TemporaryDirectory(prefix="wasm-epp-unpack-") as scratch:
            folders = {source: Path(scratch) / "packed", target: Path(scratch) / "unpacked"}
            for folder in folders.values():
                folder.mkdir()
            local = re.sub("|".join(re.escape(p) for p in sorted(folders, key=len, reverse=True)),
                           lambda m: str(folders[m.group(0)]), script)
            for key, data in packed.items():
                (folders[source] / key).write_bytes(data)
            run = subprocess.run(["/bin/sh", "-c", local], capture_output=True, text=True, timeout=60)
            if run.returncode != 0:
                fail(where, f"exit {run.returncode}: {run.stderr.strip()}")
                continue
            for module, data in modules.items():
                unpacked = folders[target] / module
                if not unpacked.exists() or unpacked.read_bytes() != data:
                    fail(where, f"does not unpack {module} to the built module byte for byte")
            # A module missing from the ConfigMaps must stop the pod, not start Envoy without it.
            (folders[source] / f"{next(iter(modules))}.gz").unlink()
            if subprocess.run(["/bin/sh", "-c", local], capture_output=True, timeout=60).returncode == 0:
                fail(where, "succeeds with a module missing from the ConfigMaps")
    return len(steps)
