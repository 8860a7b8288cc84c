"""The Kubernetes manifests and the container file, checked offline: the
YAML parses (python3-yaml; exit 77 without it), the fields the fleet
relies on are present (GPU resource, probes on /healthz and /readyz, the
preStop drain, a grace period longer than the daemon's, a memory limit
above limits.max_memory_mb, a token Secret only its owner reads), the
ConfigMap's mfmad.conf passes mfmad --check-config, and the container file
runs the README's setup command, holds the configuration its CMD names
and builds without the checkout's build directories (.dockerignore)."""
import os
import re
import subprocess
import sys
import tempfile

import fleet

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
K8S = os.path.join(ROOT, "deploy", "k8s")


def conf_value(conf, key):
    m = re.search(rf"\b{key}\s*=\s*(\d+)\s*;", conf)
    assert m, f"mfmad.conf in the ConfigMap has no {key}"
    return int(m.group(1))


def main():
    try:
        import yaml
    except ImportError:
        fleet.skip("python3-yaml is not installed (scripts/setup.sh installs it)")
    docs = {}
    for name in sorted(os.listdir(K8S)):
        if name.endswith(".yaml"):
            with open(os.path.join(K8S, name)) as f:
                for d in yaml.safe_load_all(f):
                    assert d.get("apiVersion") and d.get("kind"), f"{name}: apiVersion/kind"
                    docs[d["kind"]] = d
    for kind in ("ConfigMap", "DaemonSet", "Service"):
        assert kind in docs, f"deploy/k8s has no {kind}"
    conf = docs["ConfigMap"]["data"]["mfmad.conf"]
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as f:
        f.write(conf)
        f.flush()
        r = subprocess.run([fleet.MFMAD, "--config", f.name, "--check-config"],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"the ConfigMap's mfmad.conf: {r.stderr}"
    spec = docs["DaemonSet"]["spec"]["template"]["spec"]
    c = spec["containers"][0]
    limits = c["resources"]["limits"]
    assert "nvidia.com/gpu" in limits or "amd.com/gpu" in limits, "no GPU resource"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert " drain" in " ".join(c["lifecycle"]["preStop"]["exec"]["command"]), \
        "preStop is not a drain"
    grace_s = conf_value(conf, "shutdown_grace_ms") / 1000.0
    assert spec["terminationGracePeriodSeconds"] >= grace_s + 5, \
        f"terminationGracePeriodSeconds < shutdown_grace_ms ({grace_s} s) + 5 s of writing"
    mem = limits["memory"]
    assert mem.endswith("Gi") and int(mem[:-2]) * 1024 > conf_value(conf, "max_memory_mb"), \
        f"memory limit {mem} is not above limits.max_memory_mb"
    # The container's ports, which the probes and the Service name, are
    # the ports the ConfigMap's daemon listens on; the preStop hook drains
    # through the configuration's Unix socket, on a mounted directory.
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports.get("mfma") == conf_value(conf, "tcp_port"), \
        f"containerPort mfma {ports.get('mfma')} is not listen.tcp_port"
    assert ports.get("metrics") == conf_value(conf, "port"), \
        f"containerPort metrics {ports.get('metrics')} is not metrics.port"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert c[probe]["httpGet"]["port"] in ("metrics", ports["metrics"]), \
            f"{probe} is not on the metrics port"
    for p in docs["Service"]["spec"]["ports"]:
        assert p["targetPort"] in ports or p["targetPort"] in ports.values(), \
            f"the Service's targetPort {p['targetPort']} is no container port"
    sock = re.search(r'\bunix\s*=\s*"([^"]+)"', conf).group(1)
    assert f"unix:{sock} drain" in " ".join(c["lifecycle"]["preStop"]["exec"]["command"]), \
        f"the preStop hook does not drain through listen.unix ({sock})"
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert os.path.dirname(sock) in mounts, f"no volume is mounted at {os.path.dirname(sock)}"
    # The token file: mfmad refuses one that others may read (a Secret's
    # files are 0644 by default, and the pod would restart in a loop).
    token_dir = os.path.dirname(re.search(r'token_file\s*=\s*"([^"]+)"', conf).group(1))
    token_mount = [m for m in c["volumeMounts"] if m["mountPath"] == token_dir]
    assert token_mount, f"no volume is mounted at the token file's directory {token_dir}"
    vol = [v for v in spec["volumes"] if v["name"] == token_mount[0]["name"]][0]
    mode = vol.get("secret", {}).get("defaultMode", 0o644)
    assert mode & 0o007 == 0, f"the token Secret's files are mode {mode:o}: mfmad refuses them" 
    assert re.search(r'state_dir\s*=\s*"([^"]+)"', conf).group(1) in mounts, \
        "weights.state_dir is not the weight volume"
    with open(os.path.join(ROOT, "deploy", "container", "Containerfile")) as f:
        cf = f.read()
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    assert cf.startswith("#") and "ARG BASE=debian:12" in cf and "FROM ${BASE}" in cf
    # The CMD's configuration file is in the image (a plain `podman run`
    # has no ConfigMap): written before the CMD.
    cmd_conf = re.search(r'CMD \["--config", "([^"]+)"\]', cf).group(1)
    assert cmd_conf in cf[:cf.index("\nCMD [")], f"the image does not install {cmd_conf}" 
    assert "bash scripts/setup.sh --install" in readme and "bash scripts/setup.sh --install" in cf, \
        "the container file does not run the README's setup command"
    # The checkout's build directories stay out of the context: one made
    # by the README's first command names this machine's source path, and
    # setup.sh in the image would build (and install) through it.
    with open(os.path.join(ROOT, ".dockerignore")) as f:
        ignored = [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
    assert "build*/" in ignored, ".dockerignore does not keep build*/ out of the image"
    print(f"deploy/k8s: {', '.join(sorted(docs))} parse and carry the fields; the ConfigMap's "
          f"mfmad.conf is valid; grace {spec['terminationGracePeriodSeconds']} s >= "
          f"{grace_s:.0f} s + 5 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
