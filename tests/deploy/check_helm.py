#!/usr/bin/env python3
"""The Helm chart lints, renders with several value sets, every rendered
object passes the Kubernetes schema check, and the rendered manifests have
the properties the deployment relies on.

Uses helm 3 from the npm tool cache (setup_tools.sh) or PATH; skips (77) when
neither exists (helm is not packaged in Debian). Value sets:
  defaults       must be refused: TLS is on and worker.nodes is empty
  tls            TLS + tokens on, two worker nodes
  h100           deploy/helm/examples/values-h100-ndr.yaml (RDMA, link rates,
                 cert-manager)
  full           tls + every monitoring resource, persistence, cert-manager,
                 the metrics web config with basic auth
  insecure-cpu   deploy/helm/examples/values-cpu-insecure.yaml
  cpu-workers    TLS off, CPU devices, no node list (one DaemonSet)
and values that values.schema.json must reject, naming the field. Asserted:
TLS flags and their read-only Secret mounts (cert-manager-compatible names),
--insecure exactly when TLS is off, one pinned DaemonSet per node mounting
that node's Secret, no 0.0.0.0 binds, no hostNetwork unless asked, probes
(gRPC health without TLS, TCP with it), PodDisruptionBudgets, capabilities,
RDMA/GPU resources, /dev/shm, the controller's link rates, cert-manager
Certificates matching the mounted Secrets, and the metrics web config.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_test_util import (REPO, Checker, find_tool, load_yaml_docs, run,  # noqa: E402
                              schema_check, skip, tools_status)

CHART = os.path.join(REPO, "deploy", "helm", "meshcast")
EXAMPLES = os.path.join(REPO, "deploy", "helm", "examples")
NODES = ["gpu-a", "gpu-b.example"]
NODE_ARGS = ["--set", "worker.nodes={" + ",".join(NODES) + "}"]
VALUE_SETS = {
    "tls": NODE_ARGS,
    "h100": ["-f", os.path.join(EXAMPLES, "values-h100-ndr.yaml")],
    "full": NODE_ARGS + ["--set", "monitoring.serviceMonitor.enabled=true",
                         "--set", "monitoring.prometheusRule.enabled=true",
                         "--set", "monitoring.dashboards.enabled=true",
                         "--set", "controller.persistence.enabled=true",
                         "--set", "monitoring.serviceMonitor.labels.release=kube-prometheus-stack",
                         "--set", "certManager.enabled=true",
                         "--set", "monitoring.metricsWebConfig.enabled=true",
                         "--set", "monitoring.metricsWebConfig.basicAuthSecretName=meshcast-metrics-basic-auth"],
    "insecure-cpu": ["-f", os.path.join(EXAMPLES, "values-cpu-insecure.yaml")],
    "cpu-workers": ["--set", "tls.enabled=false", "--set", "worker.devices=cpu:4",
                    "--set", "worker.nodeSelector=null", "--set", "worker.tolerations=null"],
}
# (values, the field the error must name)
REJECTED = [
    (["--set", "worker.devices=gpus"], "worker.devices"),
    (NODE_ARGS + ["--set", "controller.topology.interGbps=0"], "interGbps"),
    (NODE_ARGS + ["--set", "worker.rdma.resourceName=hca"], "resourceName"),
    (NODE_ARGS + ["--set", "tls.controllerSecretName=Bad_Name"], "controllerSecretName"),
    (["--set", "worker.nodes={Bad_Node}"], "nodes"),
]
TLS_FILES = {"--tls_cert": "tls.crt", "--tls_key": "tls.key", "--tls_ca": "ca.crt"}


def find(objs, kind):
    return [o for o in objs if o["kind"] == kind]


def args_of(container):
    """{flag: value} of --flag=value args; flags without a value map to True."""
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


def secret_of_file(pod, container, path):
    for mount, secret in secret_mounts(pod, container).items():
        if path.startswith(mount.rstrip("/") + "/"):
            return secret
    return None


class Rendered:
    def __init__(self, objs):
        self.objs = objs
        dep = find(objs, "Deployment")[0]["spec"]["template"]["spec"]
        self.ctrl_pod, self.ctrl = dep, dep["containers"][0]
        self.workers = {}  # DaemonSet name -> (pod spec, container)
        for ds in find(objs, "DaemonSet"):
            pod = ds["spec"]["template"]["spec"]
            self.workers[ds["metadata"]["name"]] = (pod, pod["containers"][0])

    def daemons(self):
        yield "controller", self.ctrl_pod, self.ctrl
        for name, (pod, cont) in self.workers.items():
            yield name, pod, cont


def check_tokens(c, label, pod, cont):
    """--tokens_file is a mode-0600 copy of Secret meshcast-tokens key tokens,
    made by an init container into a memory emptyDir (the controller refuses
    a group-readable tokens file, and Secret volume files are group-readable
    with fsGroup)."""
    path = cont and args_of(cont).get("--tokens_file")
    if not c.check(isinstance(path, str) and path.endswith("/tokens"),
                   f"{label}: controller --tokens_file names key tokens ({path})"):
        return
    directory = os.path.dirname(path)
    mounts = {m["mountPath"]: m for m in cont["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    mount = mounts.get(directory, {})
    c.check(mount.get("readOnly") is True and
            volumes.get(mount.get("name"), {}).get("emptyDir", {}).get("medium") == "Memory",
            f"{label}: tokens directory {directory} is a read-only memory emptyDir in the controller")
    inits = pod.get("initContainers", [])
    ok = False
    for init in inits:
        cmd = init.get("command", [])
        imounts = {m["name"]: m for m in init.get("volumeMounts", [])}
        src = next((m for n, m in imounts.items() if volumes.get(n, {}).get("secret", {}).get("secretName")
                    == "meshcast-tokens" and m.get("readOnly") is True), None)
        dst = imounts.get(mount.get("name"))
        ok |= (cmd[:3] == ["install", "-m", "0600"] and src is not None and dst is not None and
               cmd[-2] == src["mountPath"] + "/tokens" and cmd[-1] == path and dst["mountPath"] == directory)
    c.check(ok, f"{label}: an init container installs Secret meshcast-tokens key tokens as {path} mode 0600")


def check_tls_on(c, label, r, nodes, tokens=True):
    for name, pod, cont in r.daemons():
        a = args_of(cont)
        c.check("--insecure" not in a, f"{label}: {name} must not run with --insecure when TLS is on")
        for flag, key in TLS_FILES.items():
            path = a.get(flag)
            c.check(isinstance(path, str) and path.endswith("/" + key),
                    f"{label}: {name} {flag} names the Secret key {key} ({path})")
            c.check(path is not None and secret_of_file(pod, cont, path) is not None,
                    f"{label}: {name} {flag}={path} is not under a read-only Secret mount")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            p = cont.get(probe, {})
            c.check("tcpSocket" in p and "grpc" not in p,
                    f"{label}: {name} {probe} must be a TCP probe with TLS (kubelet gRPC probes are plaintext)")
    a = args_of(r.ctrl)
    c.check(secret_of_file(r.ctrl_pod, r.ctrl, a.get("--tls_cert", "")) == "meshcast-controller-tls",
            f"{label}: controller certificate from Secret meshcast-controller-tls")
    if tokens:
        check_tokens(c, label, r.ctrl_pod, r.ctrl)
    c.check(sorted(r.workers) == sorted(f"mc-meshcast-worker-{n}" for n in nodes),
            f"{label}: one worker DaemonSet per node {nodes}: {sorted(r.workers)}")
    for node in nodes:
        pod, cont = r.workers.get(f"mc-meshcast-worker-{node}", ({}, {}))
        if not pod:
            continue
        a = args_of(cont)
        c.check(secret_of_file(pod, cont, a.get("--tls_cert", "")) == f"meshcast-worker-tls-{node}",
                f"{label}: worker on {node} mounts only Secret meshcast-worker-tls-{node}")
        c.check(sum(1 for s in secret_mounts(pod, cont).values() if s.startswith("meshcast-worker-tls")) == 1,
                f"{label}: worker on {node} mounts exactly one worker certificate")
        c.check(a.get("--controller_identity") == "meshcast-controller",
                f"{label}: worker on {node} --controller_identity=meshcast-controller")
        c.check(a.get("--name") == "$(NODE_NAME)", f"{label}: worker on {node} is named after its node")
        terms = (pod.get("affinity", {}).get("nodeAffinity", {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", []))
        c.check(bool(terms) and all({"key": "metadata.name", "operator": "In", "values": [node]}
                                    in t.get("matchFields", []) for t in terms),
                f"{label}: worker DaemonSet for {node} is pinned to that node by name")


def check_tls_off(c, label, r):
    for name, pod, cont in r.daemons():
        a = args_of(cont)
        c.check(a.get("--insecure") is True, f"{label}: {name} gets an explicit --insecure when TLS is off")
        c.check(not any(f in a for f in list(TLS_FILES) + ["--tokens_file", "--controller_identity"]),
                f"{label}: {name} has no TLS flags when TLS is off")
        c.check(not any(s.startswith("meshcast-") and "tls" in s for s in secret_mounts(pod, cont).values()),
                f"{label}: {name} mounts no TLS Secret when TLS is off")
        port = next(p["containerPort"] for p in cont["ports"] if p["name"] == "grpc")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            c.check(cont.get(probe, {}).get("grpc", {}).get("port") == port,
                    f"{label}: {name} {probe} uses the gRPC health service on port {port}")


def check_common(c, label, r):
    for name, pod, cont in r.daemons():
        a = args_of(cont)
        for flag in ("--listen", "--metrics-address"):
            value = str(a.get(flag, ""))
            c.check(value.startswith("$(POD_IP)") or (label == "insecure-cpu" and name == "controller"),
                    f"{label}: {name} {flag} binds the pod IP ({value})")
        envs = {e["name"] for e in cont.get("env", [])}
        c.check("POD_IP" in envs, f"{label}: {name} has POD_IP for its bind address")
        sc = cont.get("securityContext", {})
        c.check(sc.get("allowPrivilegeEscalation") is False and sc.get("capabilities", {}).get("drop") == ["ALL"],
                f"{label}: {name} drops every capability, no privilege escalation")
        c.check(isinstance(cont.get("resources", {}).get("limits", {}).get("memory"), str),
                f"{label}: {name} has a memory limit")
    # PodDisruptionBudgets select the pods they are meant for.
    pdbs = {p["metadata"]["name"]: p["spec"] for p in find(r.objs, "PodDisruptionBudget")}
    ctrl = pdbs.get("mc-meshcast-controller", {})
    c.check(ctrl.get("maxUnavailable") == 0, f"{label}: controller PodDisruptionBudget maxUnavailable 0")
    labels = find(r.objs, "Deployment")[0]["spec"]["template"]["metadata"]["labels"]
    c.check(all(labels.get(k) == v for k, v in ctrl.get("selector", {}).get("matchLabels", {"-": "-"}).items()),
            f"{label}: controller PodDisruptionBudget selects the controller pod")


def check_worker_pdb(c, label, r, count):
    pdb = [p["spec"] for p in find(r.objs, "PodDisruptionBudget") if p["metadata"]["name"] == "mc-meshcast-worker"]
    if not c.check(len(pdb) == 1, f"{label}: worker PodDisruptionBudget"):
        return
    # DaemonSet pods allow only an integer minAvailable.
    c.check(pdb[0].get("minAvailable") == count - 1 and "maxUnavailable" not in pdb[0],
            f"{label}: worker PodDisruptionBudget minAvailable = {count} nodes - 1 ({pdb[0]})")
    sel = pdb[0]["selector"]["matchLabels"]
    pods = [ds["spec"]["template"]["metadata"]["labels"] for ds in find(r.objs, "DaemonSet")]
    c.check(len(pods) == count and all(all(p.get(k) == v for k, v in sel.items()) for p in pods),
            f"{label}: worker PodDisruptionBudget selects every worker DaemonSet's pods")


def check_gpu_worker(c, label, r, rdma):
    for name, (pod, cont) in r.workers.items():
        limits = cont["resources"]["limits"]
        c.check(limits.get("nvidia.com/gpu") == 8, f"{label}: {name} 8 GPUs")
        sc = cont["securityContext"]
        shm = [v for v in pod["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"]
        c.check(any(m["mountPath"] == "/dev/shm" and m["name"] in {v["name"] for v in shm}
                    for m in cont["volumeMounts"]) and all(v["emptyDir"].get("sizeLimit") for v in shm),
                f"{label}: {name} /dev/shm is a sized memory emptyDir")
        env = {e["name"]: e.get("value") for e in cont["env"]}
        if rdma:
            c.check(limits.get("rdma/hca_shared_devices_a") == 1, f"{label}: {name} RDMA device-plugin resource")
            c.check(sc.get("capabilities", {}).get("add") == ["IPC_LOCK"], f"{label}: {name} IPC_LOCK")
            c.check(pod["securityContext"].get("runAsUser") == 0,
                    f"{label}: {name} runs as UID 0 (added capabilities reach root only)")
            c.check(env.get("NCCL_IB_DISABLE") == "0", f"{label}: {name} NCCL may use InfiniBand")
        else:
            c.check(not any(k.startswith("rdma/") for k in limits) and "add" not in sc.get("capabilities", {}),
                    f"{label}: {name} no RDMA resource and no added capability by default")
            c.check(pod["securityContext"].get("runAsNonRoot") is True, f"{label}: {name} runs as non-root")
        c.check("hostNetwork" not in pod, f"{label}: {name} no hostNetwork unless values ask for it")


def check_cert_manager(c, label, r, nodes):
    certs = {o["spec"]["secretName"]: o["spec"] for o in find(r.objs, "Certificate")}
    issuers = {o["metadata"]["name"] for o in find(r.objs, "Issuer")}
    ctrl = certs.get("meshcast-controller-tls")
    if c.check(ctrl is not None, f"{label}: Certificate for Secret meshcast-controller-tls"):
        c.check(ctrl["commonName"] == "meshcast-controller" and
                ctrl.get("subject", {}).get("organizationalUnits") == ["controller"],
                f"{label}: controller certificate CN meshcast-controller, OU controller")
        address = next(e["value"] for e in next(iter(r.workers.values()))[1]["env"]
                       if e["name"] == "MESHCAST_CONTROLLER").split(":")[0]
        c.check(address in ctrl["dnsNames"], f"{label}: controller certificate covers {address}")
    for node in nodes:
        cert = certs.get(f"meshcast-worker-tls-{node}")
        c.check(cert is not None and cert["commonName"] == node and node in cert.get("dnsNames", []) and
                cert.get("subject", {}).get("organizationalUnits") == ["worker"],
                f"{label}: Certificate meshcast-worker-tls-{node} with CN and DNS name {node}, OU worker")
    for secret, spec in certs.items():
        c.check(spec["issuerRef"]["name"] in issuers, f"{label}: {secret} issuer is rendered")


def check_web_config(c, label, r):
    for name, pod, cont in r.daemons():
        path = args_of(cont).get("--metrics_web_config")
        c.check(isinstance(path, str) and secret_of_file(pod, cont, path) == "meshcast-metrics-web-config",
                f"{label}: {name} --metrics_web_config from Secret meshcast-metrics-web-config ({path})")
        c.check("meshcast-metrics-tls" in secret_mounts(pod, cont).values(),
                f"{label}: {name} mounts the metrics certificate")
    for sm in find(r.objs, "ServiceMonitor"):
        ep = sm["spec"]["endpoints"][0]
        c.check(ep.get("scheme") == "https" and ep.get("tlsConfig", {}).get("serverName") == "meshcast-metrics"
                and ep.get("basicAuth", {}).get("password", {}).get("name") == "meshcast-metrics-basic-auth",
                f"{label}: ServiceMonitor {sm['metadata']['name']} scrapes https with basic auth")


def main():
    helm = find_tool("helm")
    if not helm:
        status, why = tools_status()
        skip(f"helm is not packaged in Debian and the npm-provided one is unavailable ({status}: {why})")
    c = Checker()
    for values in ("values-h100-ndr.yaml", "values-cpu-insecure.yaml"):
        r = run([helm, "lint", "--strict", CHART, "-f", os.path.join(EXAMPLES, values)], timeout=60)
        print(r.stdout + r.stderr, end="")
        c.check(r.returncode == 0, f"helm lint --strict -f {values}")

    r = run([helm, "template", "mc", CHART, "--namespace", "meshcast"], timeout=60)
    c.check(r.returncode != 0 and "worker.nodes" in r.stderr,
            "defaults (TLS on, no worker.nodes) must be refused naming worker.nodes")
    raw = {}
    for name, args in VALUE_SETS.items():
        r = run([helm, "template", "mc", CHART, "--namespace", "meshcast"] + args, timeout=60)
        if not c.check(r.returncode == 0, f"helm template ({name}): {r.stderr.strip()}"):
            continue
        raw[name] = load_yaml_docs(r.stdout)
        print(f"{name}: {', '.join(sorted(o['kind'] + '/' + o['metadata']['name'] for o in raw[name]))}")
    rendered = {name: Rendered(objs) for name, objs in raw.items()}
    for name, r in rendered.items():
        check_common(c, name, r)

    if "tls" in rendered:
        r = rendered["tls"]
        check_tls_on(c, "tls", r, NODES)
        check_worker_pdb(c, "tls", r, len(NODES))
        check_gpu_worker(c, "tls", r, rdma=False)
        c.check(not find(r.objs, "Certificate") and not find(r.objs, "ServiceMonitor"),
                "tls: cert-manager and monitoring resources are off by default")
        for a in ("--inter-gbps=10", "--intra-gbps=100"):
            c.check(a in r.ctrl["args"], f"tls: controller link rate {a} from values")
    if "h100" in rendered:
        r = rendered["h100"]
        check_tls_on(c, "h100", r, ["gpu-node-01", "gpu-node-02"])
        check_gpu_worker(c, "h100", r, rdma=True)
        check_cert_manager(c, "h100", r, ["gpu-node-01", "gpu-node-02"])
        for a in ("--inter-gbps=3200", "--intra-gbps=3600", "--inter-latency-us=10", "--intra-latency-us=2"):
            c.check(a in r.ctrl["args"], f"h100: controller link rate {a}")
    if "full" in rendered:
        r = rendered["full"]
        check_tls_on(c, "full", r, NODES)
        check_cert_manager(c, "full", r, NODES)
        check_web_config(c, "full", r)
        sms = find(r.objs, "ServiceMonitor")
        c.check(len(sms) == 2 and all(s["metadata"]["labels"].get("release") == "kube-prometheus-stack"
                                      for s in sms), "full: two ServiceMonitors with the extra labels")
        c.check(all(s["spec"]["jobLabel"] == "app.kubernetes.io/name" for s in sms), "full: job labels")
        rules = find(r.objs, "PrometheusRule")
        alerts = [x.get("alert") for g in (rules[0]["spec"]["groups"] if rules else []) for x in g["rules"]]
        c.check("MeshcastWorkerLost" in alerts and "MeshcastBandwidthBelowPrediction" in alerts,
                "full: PrometheusRule carries the alerts")
        c.check(len(find(r.objs, "ConfigMap")) == 3, "full: three dashboard ConfigMaps")
        c.check(len(find(r.objs, "PersistentVolumeClaim")) == 1, "full: PVC")
    if "insecure-cpu" in rendered:
        r = rendered["insecure-cpu"]
        check_tls_off(c, "insecure-cpu", r)
        c.check(args_of(r.ctrl).get("--listen") == "0.0.0.0:50051",
                "insecure-cpu: controller binds its pod's namespace for port-forward, as the example asks")
    if "cpu-workers" in rendered:
        r = rendered["cpu-workers"]
        check_tls_off(c, "cpu-workers", r)
        c.check(list(r.workers) == ["mc-meshcast-worker"], "cpu-workers: one DaemonSet without a node list")
        pod, cont = r.workers.get("mc-meshcast-worker", ({}, {"args": [], "resources": {}}))
        c.check("--devices=cpu:4" in cont["args"] and "nvidia.com/gpu" not in cont["resources"].get("limits", {}),
                "cpu-workers: CPU devices and no GPU limits")
        c.check("hostNetwork" not in pod and "nodeSelector" not in pod, "cpu-workers: pod network, any node")
        c.check(not [p for p in find(r.objs, "PodDisruptionBudget") if p["metadata"]["name"].endswith("worker")],
                "cpu-workers: no worker budget without a node count")

    r = run([helm, "template", "mc", CHART] + NODE_ARGS + ["--set", "worker.hostNetwork=true"], timeout=60)
    if c.check(r.returncode == 0, f"helm template hostNetwork: {r.stderr.strip()}"):
        for ds in find(load_yaml_docs(r.stdout), "DaemonSet"):
            pod = ds["spec"]["template"]["spec"]
            a = args_of(pod["containers"][0])
            c.check(pod.get("hostNetwork") is True and pod.get("dnsPolicy") == "ClusterFirstWithHostNet"
                    and a.get("--listen", "").startswith("$(POD_IP)"),
                    "hostNetwork on request, with cluster DNS, binding the node IP only")
    for args, field in REJECTED:
        r = run([helm, "template", "mc", CHART] + args, timeout=60)
        c.check(r.returncode != 0 and field in r.stderr,
                f"values.schema.json must reject {' '.join(args[-1:])} naming {field}: {r.stderr.strip()[:200]}")

    objects = [(f"helm {n}", o) for n, objs in raw.items() for o in objs]
    if not schema_check(objects, c, "helm") and not c.failures:
        status, why = tools_status()
        skip(f"helm rendering passed but the schema packages are unavailable ({status}: {why})")
    c.finish()


if __name__ == "__main__":
    main()
