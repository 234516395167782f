#!/usr/bin/env python3
"""The Helm chart lints, renders with several value sets, and every rendered
object passes the Kubernetes schema check.

Uses helm 3 from the npm tool cache (setup_tools.sh) or PATH; skips (77) when
neither exists (helm is not packaged in Debian). Value sets: defaults (GPU
workers), everything on (monitoring, persistence), CPU workers, and one that
must be rejected by values.schema.json (a bad --devices value).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_test_util import (REPO, Checker, find_tool, load_yaml_docs, run,  # noqa: E402
                              schema_check, skip, tools_status)

CHART = os.path.join(REPO, "deploy", "helm", "meshcast")
VALUE_SETS = {
    "defaults": [],
    "monitoring+persistence": ["--set", "monitoring.serviceMonitor.enabled=true",
                               "--set", "monitoring.prometheusRule.enabled=true",
                               "--set", "monitoring.dashboards.enabled=true",
                               "--set", "controller.persistence.enabled=true",
                               "--set", "monitoring.serviceMonitor.labels.release=kube-prometheus-stack"],
    "cpu-workers": ["--set", "worker.devices=cpu:4", "--set", "worker.hostNetwork=false",
                    "--set", "worker.nodeSelector=null", "--set", "worker.tolerations=null"],
}


def kinds(objs):
    return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objs)


def main():
    helm = find_tool("helm")
    if not helm:
        status, why = tools_status()
        skip(f"helm is not packaged in Debian and the npm-provided one is unavailable ({status}: {why})")
    c = Checker()
    r = run([helm, "lint", "--strict", CHART], timeout=60)
    print(r.stdout + r.stderr, end="")
    c.check(r.returncode == 0, "helm lint --strict")
    rendered = {}
    for name, args in VALUE_SETS.items():
        r = run([helm, "template", "mc", CHART, "--namespace", "meshcast"] + args, timeout=60)
        if not c.check(r.returncode == 0, f"helm template ({name}): {r.stderr.strip()}"):
            continue
        rendered[name] = load_yaml_docs(r.stdout)
        print(f"{name}: {', '.join(kinds(rendered[name]))}")

    def find(objs, kind):
        return [o for o in objs if o["kind"] == kind]

    if "defaults" in rendered:
        objs = rendered["defaults"]
        c.check(not find(objs, "ServiceMonitor") and not find(objs, "PrometheusRule") and not find(objs, "ConfigMap"),
                "defaults: monitoring resources are off")
        ds = find(objs, "DaemonSet")[0]["spec"]["template"]["spec"]
        wc = ds["containers"][0]
        c.check(ds.get("hostNetwork") is True and ds.get("dnsPolicy") == "ClusterFirstWithHostNet",
                "defaults: host networking with ClusterFirstWithHostNet")
        c.check(wc["resources"]["limits"].get("nvidia.com/gpu") == 8, "defaults: 8 GPUs per worker")
        c.check(any(t["key"] == "nvidia.com/gpu" for t in ds["tolerations"]), "defaults: GPU toleration")
        env = {e["name"]: e.get("value") for e in wc["env"]}
        c.check(env.get("MESHCAST_CONTROLLER") == "mc-meshcast-controller:50051",
                f"defaults: controller address {env.get('MESHCAST_CONTROLLER')}")
        services = {s["metadata"]["name"] for s in find(objs, "Service")}
        c.check("mc-meshcast-controller" in services, "defaults: controller Service name matches the address")
        dep = find(objs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
        c.check(dep["livenessProbe"].get("grpc", {}).get("port") == 50051, "defaults: gRPC liveness probe")
        c.check(dep["image"] == "meshcast-controller:0.1.0", f"defaults: image tag = appVersion ({dep['image']})")
    if "monitoring+persistence" in rendered:
        objs = rendered["monitoring+persistence"]
        sms = find(objs, "ServiceMonitor")
        c.check(len(sms) == 2 and all(s["metadata"]["labels"].get("release") == "kube-prometheus-stack"
                                      for s in sms), "monitoring: two ServiceMonitors with the extra labels")
        c.check(all(s["spec"]["jobLabel"] == "app.kubernetes.io/name" for s in sms), "monitoring: job labels")
        rules = find(objs, "PrometheusRule")
        alerts = [r.get("alert") for g in (rules[0]["spec"]["groups"] if rules else []) for r in g["rules"]]
        c.check("MeshcastWorkerLost" in alerts and "MeshcastQueueGrowing" in alerts,
                "monitoring: PrometheusRule carries the alerts")
        c.check(len(find(objs, "ConfigMap")) == 3, "monitoring: three dashboard ConfigMaps")
        c.check(len(find(objs, "PersistentVolumeClaim")) == 1, "persistence: PVC")
    if "cpu-workers" in rendered:
        ds = find(rendered["cpu-workers"], "DaemonSet")[0]["spec"]["template"]["spec"]
        wc = ds["containers"][0]
        c.check("--devices=cpu:4" in wc["args"] and "nvidia.com/gpu" not in wc["resources"].get("limits", {}),
                "cpu-workers: CPU devices and no GPU limits")
        c.check("hostNetwork" not in ds and "nodeSelector" not in ds, "cpu-workers: pod network, any node")

    r = run([helm, "template", "mc", CHART, "--set", "worker.devices=gpus"], timeout=60)
    c.check(r.returncode != 0 and "worker.devices" in r.stderr,
            "values.schema.json must reject worker.devices=gpus naming the field")

    objects = [(f"helm {n}", o) for n, objs in rendered.items() for o in objs]
    if not schema_check(objects, c, "helm") and not c.failures:
        status, why = tools_status()
        skip(f"helm rendering passed but the schema packages are unavailable ({status}: {why})")
    c.finish()


if __name__ == "__main__":
    main()
