#!/usr/bin/env python3
"""Interop: clients nobody here wrote, against a real ringkv-server on a free loopback port.

- grpcurl (github.com/fullstorydev/grpcurl v1.9.4): lists the services through server reflection,
  describes ringkv.v1.KV, calls Put and Get with no .proto files at hand.
- Python grpcio: stubs generated at test time with grpcio-tools from the shipped kv.proto and
  health.proto; put, get, multi-get, NOT_FOUND, a Stream, a deadline that expires, a cancel in
  the middle of a stream, health Check and Watch.
- ghz v0.121.0 (Go's gRPC) and h2load (nghttp2's HTTP/2 load generator, with a fixed gRPC
  request body): a short unary run each, with no error.

Usage: interop_test.py SERVER_BINARY PROTO_DIR TOOLS_DIR [SERVER_FLAG...]
TOOLS_DIR holds what scripts/setup.sh installs: bin/grpcurl and venv/ (grpcio, grpcio-tools).
The server flags pick the transport (meson runs this once per transport). This script re-runs
itself under the venv's Python.
"""
import base64
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server", "testing"))
import python_stubs  # noqa: E402
from ringkv_server import RingkvServer  # noqa: E402
import venv_main  # noqa: E402

SERVER, PROTO_DIR, TOOLS = sys.argv[1:4] if len(sys.argv) >= 4 else (None, None, None)
SERVER_FLAGS = sys.argv[4:]


class InteropTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = RingkvServer(SERVER, "--threads=2", *SERVER_FLAGS)
        cls.addClassCleanup(cls.server.stop)
        cls.addr = cls.server.address

        cls.gen = python_stubs.generate(PROTO_DIR)

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
        for method in ("Get", "Put", "Delete", "MultiGet", "MultiPut", "Stream", "Stats",
                       "Expire", "Persist", "Increment", "Scan"):
            self.assertIn(f"rpc {method}", described)
        self.assertIn("// Gives a key a TTL", described)  # The .proto's comments come along.
        self.grpcurl("describe", "grpc.health.v1.Health")
        b64 = lambda s: base64.b64encode(s).decode()
        self.grpcurl("ringkv.v1.KV/Put", data={"key": b64(b"curl:k"), "value": b64(b"from-grpcurl")})
        got = json.loads(self.grpcurl("ringkv.v1.KV/Get", data={"key": b64(b"curl:k")}))
        self.assertEqual(base64.b64decode(got["value"]), b"from-grpcurl")
        # A compare-and-set with the version Get gave (proto3 JSON writes 64-bit as strings).
        put = json.loads(self.grpcurl("ringkv.v1.KV/Put", data={
            "key": b64(b"curl:k"), "value": b64(b"cas"), "ttlMs": "60000",
            "condition": {"version": got["version"]}}))
        self.assertGreater(int(put["version"]), int(got["version"]))
        got = json.loads(self.grpcurl("ringkv.v1.KV/Get", data={"key": b64(b"curl:k")}))
        self.assertEqual(base64.b64decode(got["value"]), b"cas")
        # grpcurl names fields as the reflected descriptor does (no json_name there).
        self.assertTrue(0 < int(got.get("ttlMs", got.get("ttl_ms"))) <= 60000, got)
        total = json.loads(self.grpcurl("ringkv.v1.KV/Increment",
                                        data={"key": b64(b"curl:n"), "delta": "-4"}))
        self.assertEqual(total["value"], "-4")
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
            with self.assertRaises(grpc.RpcError) as taken:
                kv.Put(kv_pb2.PutRequest(key=b"py:1", value=b"x",
                                         condition=kv_pb2.Condition(absent=True)), timeout=10)
            self.assertEqual(taken.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
            self.assertIn("version is", taken.exception.details())
            self.assertEqual(kv.Increment(kv_pb2.IncrementRequest(key=b"py:n", delta=3),
                                          timeout=10).value, 3)
            multi = kv.MultiGet(kv_pb2.MultiGetRequest(keys=[b"py:1", b"py:none", b"py:2"]),
                                timeout=10)
            self.assertEqual([r.code for r in multi.results], [0, 5, 0])
            self.assertEqual(multi.results[2].value, b"\x00two")
            health = health_pb2_grpc.HealthStub(channel)
            for service in ("", "ringkv.v1.KV"):
                status = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
                self.assertEqual(status.status, health_pb2.HealthCheckResponse.SERVING)
            watch = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=10)
            self.assertEqual(next(watch).status, health_pb2.HealthCheckResponse.SERVING)
            watch.cancel()

    def test_large_values_come_back_whole_many_calls_at_once(self):
        # From 16 KiB up, the h2 transport sends a GET's value from the buffer it left the shard
        # in, shared with the connection's output rather than copied (net/send_queue.h): the
        # bytes, the fields after them, and answers interleaved on one connection must still be
        # exact.
        import grpc
        from ringkv.v1 import kv_pb2, kv_pb2_grpc
        sizes = [16383, 16384, 16385, 100_000, (1 << 20) + 7]
        values = {f"big:{n}".encode(): os.urandom(n) for n in sizes}
        options = [("grpc.max_receive_message_length", 8 << 20)]
        with grpc.insecure_channel(self.addr, options=options) as channel:
            kv = kv_pb2_grpc.KVStub(channel)
            versions = {}
            for key, value in values.items():
                versions[key] = kv.Put(kv_pb2.PutRequest(key=key, value=value, ttl_ms=600_000),
                                       timeout=10).version
            calls = [(key, kv.Get.future(kv_pb2.GetRequest(key=key), timeout=30))
                     for _ in range(4) for key in values]
            for key, call in calls:
                answer = call.result()
                self.assertEqual(len(answer.value), len(values[key]), key)
                self.assertEqual(answer.value, values[key], key)
                self.assertEqual(answer.version, versions[key], key)
                self.assertTrue(0 < answer.ttl_ms <= 600_000, answer.ttl_ms)

    def test_python_grpcio_stream_deadline_and_cancel(self):
        import grpc
        from ringkv.v1 import kv_pb2, kv_pb2_grpc
        with grpc.insecure_channel(self.addr) as channel:
            kv = kv_pb2_grpc.KVStub(channel)

            def ops():
                for i in range(200):
                    yield kv_pb2.StreamRequest(ops=[kv_pb2.StreamOp(
                        id=i, type=kv_pb2.OP_TYPE_PUT, key=b"s%d" % i, value=b"v%d" % i)])
                yield kv_pb2.StreamRequest(ops=[kv_pb2.StreamOp(id=200, type=kv_pb2.OP_TYPE_GET,
                                                                key=b"py:never")])
            results = {}
            for response in kv.Stream(ops(), timeout=10):
                for r in response.results:
                    self.assertNotIn(r.id, results)
                    results[r.id] = r.result.code
            self.assertEqual(len(results), 201)
            self.assertEqual(set(results[i] for i in range(200)), {0})
            self.assertEqual(results[200], grpc.StatusCode.NOT_FOUND.value[0])
            self.assertEqual(kv.Get(kv_pb2.GetRequest(key=b"s199"), timeout=10).value, b"v199")

            # A stream that sends nothing and outlives its deadline.
            gate = threading.Event()

            def idle():
                gate.wait(5)
                return
                yield
            start = time.time()
            with self.assertRaises(grpc.RpcError) as late:
                list(kv.Stream(idle(), timeout=0.3))
            gate.set()
            self.assertEqual(late.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
            self.assertLess(time.time() - start, 3)

            # Cancelled in the middle: the client sees CANCELLED, the server goes on serving.
            def endless():
                i = 0
                while True:
                    yield kv_pb2.StreamRequest(ops=[kv_pb2.StreamOp(
                        id=i, type=kv_pb2.OP_TYPE_PUT, key=b"c%d" % i, value=b"x")])
                    i += 1
                    time.sleep(0.001)
            call = kv.Stream(endless(), timeout=10)
            next(call)
            call.cancel()
            with self.assertRaises(grpc.RpcError) as cancelled:
                for _ in call:
                    pass
            self.assertEqual(cancelled.exception.code(), grpc.StatusCode.CANCELLED)
            self.assertEqual(kv.Get(kv_pb2.GetRequest(key=b"s0"), timeout=10).value, b"v0")

    def test_ghz_and_h2load_unary_runs_without_errors(self):
        self.grpcurl("ringkv.v1.KV/Put", data={"key": base64.b64encode(b"load").decode(),
                                               "value": base64.b64encode(b"v").decode()})
        ghz = subprocess.run(
            [os.path.join(TOOLS, "bin", "ghz"), "--insecure", "--proto",
             os.path.join(PROTO_DIR, "ringkv", "v1", "kv.proto"), "--import-paths", PROTO_DIR,
             "--call", "ringkv.v1.KV/Get", "-d", '{"key":"bG9hZA=="}', "-n", "2000", "-c", "8",
             "--connections", "2", "--timeout", "10s", "--format", "json", self.addr],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(ghz.returncode, 0, ghz.stderr)
        report = json.loads(ghz.stdout)
        self.assertEqual(report["count"], 2000)
        self.assertEqual(report.get("statusCodeDistribution"), {"OK": 2000}, report)

        h2load = shutil.which("h2load")
        self.assertIsNotNone(h2load, "h2load missing: run scripts/setup.sh (nghttp2-client)")
        body = os.path.join(self.gen, "get.bin")
        with open(body, "wb") as f:
            f.write(struct.pack(">BI", 0, 6) + b"\x0a\x04load")  # GetRequest{key: "load"}
        run = subprocess.run(
            [h2load, "-n", "2000", "-c", "2", "-m", "10", "-d", body,
             "-H", "content-type: application/grpc", "-H", "te: trailers",
             f"http://{self.addr}/ringkv.v1.KV/Get"], capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("2000 succeeded, 0 failed, 0 errored", run.stdout)
        self.assertIn("status codes: 2000 2xx", run.stdout)


if __name__ == "__main__":
    venv_main.run(TOOLS, needs=("bin/grpcurl", "bin/ghz"))
