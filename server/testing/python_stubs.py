"""Python gRPC stubs of the shipped protos, generated at test time with grpcio-tools.

    python_stubs.generate(proto_dir)   # once per process; then:
    from ringkv.v1 import kv_pb2, kv_pb2_grpc
    import health_pb2, health_pb2_grpc
"""
import os
import sys
import tempfile

_generated = None


def generate(proto_dir):
    """Generates kv.proto and health.proto into a temporary directory on sys.path."""
    global _generated
    if _generated:
        return _generated
    from grpc_tools import protoc
    out = tempfile.mkdtemp(prefix="ringkv-pb-")
    # health.proto is generated from its own folder, as top-level health_pb2: a generated grpc/
    # package would be shadowed by grpcio's own `grpc` package.
    for include, proto in ((proto_dir, "ringkv/v1/kv.proto"),
                           (os.path.join(proto_dir, "grpc/health/v1"), "health.proto")):
        rc = protoc.main(["protoc", f"-I{include}", f"--python_out={out}",
                          f"--grpc_python_out={out}", os.path.join(include, proto)])
        assert rc == 0, f"protoc failed on {proto}"
    sys.path.insert(0, out)
    _generated = out
    return out
