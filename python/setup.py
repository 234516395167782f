"""Builds the meshcast package: the generated stubs of the public API
(proto/meshcast/v1/*.proto, compiled here with protoc and the gRPC Python
plugin, which Debian ships in protobuf-compiler and protobuf-compiler-grpc)
and the client code. The stubs are generated at build time so that they
always match the protobuf runtime of the machine that builds them.

Environment: MESHCAST_PROTO_DIR (default: ../proto beside this file),
PROTOC (default: protoc), GRPC_PYTHON_PLUGIN (default: grpc_python_plugin
on PATH).
"""

import glob
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def generate(out_dir):
    proto_dir = os.environ.get("MESHCAST_PROTO_DIR",
                               os.path.join(HERE, "..", "proto"))
    sources = sorted(glob.glob(os.path.join(proto_dir, "meshcast", "v1",
                                            "*.proto")))
    if not sources:
        raise SystemExit("meshcast: no .proto files under %s/meshcast/v1 "
                         "(set MESHCAST_PROTO_DIR)" % proto_dir)
    plugin = os.environ.get("GRPC_PYTHON_PLUGIN") or shutil.which(
        "grpc_python_plugin")
    if not plugin:
        raise SystemExit("meshcast: grpc_python_plugin not found (Debian: "
                         "protobuf-compiler-grpc; or set GRPC_PYTHON_PLUGIN)")
    subprocess.check_call([
        os.environ.get("PROTOC", "protoc"), "-I", proto_dir,
        "--python_out=" + out_dir, "--grpc_out=" + out_dir,
        "--plugin=protoc-gen-grpc=" + plugin] + sources)


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        generate(self.build_lib)


setup(cmdclass={"build_py": BuildWithStubs})
