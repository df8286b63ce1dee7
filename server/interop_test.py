#!/usr/bin/env python3
"""Interop: clients nobody here wrote, against a real ringkv-server on a free loopback port.

- grpcurl (github.com/fullstorydev/grpcurl v1.9.4): lists the services through server reflection,
  describes ringkv.v1.KV, calls Put and Get with no .proto files at hand.
- Python grpcio: stubs generated at test time with grpcio-tools from the shipped kv.proto and
  health.proto; put, get, multi-get, NOT_FOUND, and a health check.

Usage: interop_test.py SERVER_BINARY PROTO_DIR TOOLS_DIR
TOOLS_DIR holds what scripts/setup.sh installs: bin/grpcurl and venv/ (grpcio, grpcio-tools).
This script re-runs itself under the venv's Python.
"""
import base64
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server", "testing"))
from ringkv_server import RingkvServer  # noqa: E402

SERVER, PROTO_DIR, TOOLS = sys.argv[1:4] if len(sys.argv) >= 4 else (None, None, None)


class InteropTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = RingkvServer(SERVER, "--threads=2")
        cls.addClassCleanup(cls.server.stop)
        cls.addr = cls.server.address

        # Generate the Python stubs from the shipped protos.
        cls.gen = tempfile.mkdtemp(prefix="ringkv-pb-")
        from grpc_tools import protoc
        # health.proto is generated from its own folder, as top-level health_pb2: a generated
        # grpc/ package would be shadowed by grpcio's own `grpc` package.
        for include, proto in ((PROTO_DIR, "ringkv/v1/kv.proto"),
                               (os.path.join(PROTO_DIR, "grpc/health/v1"), "health.proto")):
            rc = protoc.main(["protoc", f"-I{include}", f"--python_out={cls.gen}",
                              f"--grpc_python_out={cls.gen}", os.path.join(include, proto)])
            assert rc == 0, f"protoc failed on {proto}"
        sys.path.insert(0, cls.gen)

    def test_server_stops_cleanly(self):
        pass  # The class clean-up asserts the exit status 0 after SIGTERM.

    def grpcurl(self, *args, data=None):
        cmd = [os.path.join(TOOLS, "bin", "grpcurl"), "-plaintext", "-max-time", "10"]
        if data is not None:
            cmd += ["-d", json.dumps(data)]
        r = subprocess.run(cmd + [self.addr, *args], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_grpcurl_reflection_and_calls(self):
        services = self.grpcurl("list").split()
        self.assertIn("ringkv.v1.KV", services)
        self.assertIn("grpc.health.v1.Health", services)
        described = self.grpcurl("describe", "ringkv.v1.KV")
        for method in ("Get", "Put", "Delete", "MultiGet", "MultiPut", "Stream", "Stats"):
            self.assertIn(f"rpc {method}", described)
        self.grpcurl("describe", "grpc.health.v1.Health")
        b64 = lambda s: base64.b64encode(s).decode()
        self.grpcurl("ringkv.v1.KV/Put", data={"key": b64(b"curl:k"), "value": b64(b"from-grpcurl")})
        got = json.loads(self.grpcurl("ringkv.v1.KV/Get", data={"key": b64(b"curl:k")}))
        self.assertEqual(base64.b64decode(got["value"]), b"from-grpcurl")
        health = json.loads(self.grpcurl("grpc.health.v1.Health/Check", data={}))
        self.assertEqual(health["status"], "SERVING")

    def test_python_grpcio_client(self):
        import grpc
        from ringkv.v1 import kv_pb2, kv_pb2_grpc
        import health_pb2
        import health_pb2_grpc
        with grpc.insecure_channel(self.addr) as channel:
            kv = kv_pb2_grpc.KVStub(channel)
            kv.Put(kv_pb2.PutRequest(key=b"py:1", value=b"one"), timeout=10)
            kv.Put(kv_pb2.PutRequest(key=b"py:2", value=b"\x00two"), timeout=10)
            self.assertEqual(kv.Get(kv_pb2.GetRequest(key=b"py:1"), timeout=10).value, b"one")
            with self.assertRaises(grpc.RpcError) as missing:
                kv.Get(kv_pb2.GetRequest(key=b"py:none"), timeout=10)
            self.assertEqual(missing.exception.code(), grpc.StatusCode.NOT_FOUND)
            with self.assertRaises(grpc.RpcError) as bad:
                kv.Put(kv_pb2.PutRequest(key=b"", value=b"x"), timeout=10)
            self.assertEqual(bad.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            multi = kv.MultiGet(kv_pb2.MultiGetRequest(keys=[b"py:1", b"py:none", b"py:2"]),
                                timeout=10)
            self.assertEqual([r.code for r in multi.results], [0, 5, 0])
            self.assertEqual(multi.results[2].value, b"\x00two")
            health = health_pb2_grpc.HealthStub(channel)
            for service in ("", "ringkv.v1.KV"):
                status = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
                self.assertEqual(status.status, health_pb2.HealthCheckResponse.SERVING)


if __name__ == "__main__":
    venv_python = os.path.join(TOOLS, "venv", "bin", "python3")
    if os.path.realpath(sys.prefix) != os.path.realpath(os.path.join(TOOLS, "venv")) and \
            not os.environ.get("RINGKV_INTEROP_REEXEC"):
        if not os.path.exists(venv_python) or \
                not os.path.exists(os.path.join(TOOLS, "bin", "grpcurl")):
            sys.exit(f"interop tools missing under {TOOLS}: run scripts/setup.sh")
        os.environ["RINGKV_INTEROP_REEXEC"] = "1"
        os.execv(venv_python, [venv_python, *sys.argv])
    unittest.main(argv=sys.argv[:1], verbosity=2)
