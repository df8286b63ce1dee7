#!/usr/bin/env python3
"""Metrics of a real ringkv-server (--metrics-listen, --metrics-token-file), read by Prometheus.

- /metrics needs the bearer token: none or a wrong one gets 401 with a WWW-Authenticate
  header; /healthz needs none.
- /metrics after known calls through grpcio: the call counters by method and code, the latency
  histogram's count, the keys per shard, connections (h2), persistence (--data-dir); and
  `promtool check metrics` passes on it.
- Debian's Prometheus server scrapes it every second, with the token from a credentials_file;
  the test queries its HTTP API until `up` is 1 and the Put counter shows the calls the test
  made, and `up` is 0 for a second job that sends no token.
- /healthz is 200 while serving and 503 during the drain (a Stream held open keeps the drain
  going); a client that connects and sends nothing delays nobody for long; unknown paths 404,
  other methods 405.
- Apart, short-lived servers: a non-loopback --metrics-listen (0.0.0.0) without a token file
  logs a warning naming the address and the flag, and none with one; SIGHUP re-reads the
  token file (here also the --auth-token-file), and a bad file keeps the tokens in force.

Usage: metrics_test.py SERVER_BINARY PROTO_DIR TOOLS_DIR [SERVER_FLAG...]
This script re-runs itself under the venv's Python (grpcio).
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "testing"))
import python_stubs  # noqa: E402
from ringkv_server import LogReader, RingkvServer  # noqa: E402
import venv_main  # noqa: E402

SERVER, PROTO_DIR, TOOLS = sys.argv[1:4] if len(sys.argv) >= 4 else (None,) * 3
SERVER_FLAGS = sys.argv[4:]
H2 = "--transport=grpc" not in SERVER_FLAGS


TOKEN = "scraper-s3cr3t-0123456789"


def http_full(url, method="GET", token=None, timeout=10):
    """(status, headers, body); `token` goes in an Authorization: Bearer header."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()


def http(url, method="GET", token=None, timeout=10):
    status, _, body = http_full(url, method, token, timeout)
    return status, body


def write_token_file(path, *lines):
    with open(path, "w") as f:
        f.write("".join(line + "\n" for line in lines))
    os.chmod(path, 0o600)


def sample(text, name, **labels):
    """The value of the sample `name{labels}` in a text exposition, or None."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"(\w+)(?:\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        python_stubs.generate(PROTO_DIR)
        cls.dir = tempfile.mkdtemp(prefix="ringkv-metrics-")
        tokens = os.path.join(cls.dir, "metrics-tokens")
        write_token_file(tokens, f"{TOKEN} read")
        cls.server = RingkvServer(SERVER, "--threads=2", "--metrics-listen=127.0.0.1:0",
                                  f"--metrics-token-file={tokens}",
                                  f"--data-dir={os.path.join(cls.dir, 'data')}", *SERVER_FLAGS)
        cls.log = LogReader(cls.server)
        line = cls.log.wait_for(r"metrics on http://127\.0\.0\.1:(\d+)/metrics")
        cls.base = "http://127.0.0.1:" + re.search(r":(\d+)/metrics", line).group(1)
        import grpc
        from ringkv.v1 import kv_pb2, kv_pb2_grpc
        with grpc.insecure_channel(cls.server.address) as channel:
            kv = kv_pb2_grpc.KVStub(channel)
            for i in range(7):
                kv.Put(kv_pb2.PutRequest(key=b"m%d" % i, value=b"v"), timeout=10)
            for i in range(3):
                kv.Get(kv_pb2.GetRequest(key=b"m%d" % i), timeout=10)
            for _ in range(2):
                try:
                    kv.Get(kv_pb2.GetRequest(key=b"absent"), timeout=10)
                except grpc.RpcError:
                    pass

    @classmethod
    def tearDownClass(cls):
        if cls.server.process.poll() is None:
            cls.server.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_0_bearer_token(self):
        status, headers, body = http_full(self.base + "/metrics")
        self.assertEqual(status, 401)
        self.assertEqual(headers["WWW-Authenticate"], 'Bearer realm="ringkv-metrics"')
        self.assertEqual(body.count("\n"), 1, body)
        self.assertNotIn("ringkv_", body)
        status, headers, body = http_full(self.base + "/metrics", token="wrong-token-0123456789")
        self.assertEqual(status, 401)
        self.assertTrue(headers["WWW-Authenticate"].startswith('Bearer realm="ringkv-metrics"'))
        self.assertEqual(body.count("\n"), 1, body)
        self.assertNotIn("ringkv_", body)
        status, body = http(self.base + "/metrics", token=TOKEN)
        self.assertEqual(status, 200)
        self.assertIsNotNone(sample(body, "ringkv_serving"))
        self.assertEqual(http(self.base + "/healthz"), (200, "ok\n"))
        for line in self.log.lines:
            self.assertNotIn("0123456789", line)  # Neither token is ever logged.

    def test_1_metrics_text(self):
        status, text = http(self.base + "/metrics", token=TOKEN)
        self.assertEqual(status, 200)
        self.assertEqual(sample(text, "ringkv_calls_total", method="Put", code="OK"), 7)
        self.assertEqual(sample(text, "ringkv_calls_total", method="Get", code="OK"), 3)
        self.assertEqual(sample(text, "ringkv_calls_total", method="Get", code="NOT_FOUND"), 2)
        self.assertEqual(sample(text, "ringkv_call_duration_seconds_count", method="Put"), 7)
        self.assertEqual(sample(text, "ringkv_call_duration_seconds_bucket", method="Put",
                                le="+Inf"), 7)
        self.assertGreater(sample(text, "ringkv_call_duration_seconds_sum", method="Put"), 0)
        keys = [sample(text, "ringkv_keys", shard=str(s)) for s in range(2)]
        self.assertEqual(sum(keys), 7)
        self.assertEqual(sample(text, "ringkv_serving"), 1)
        self.assertEqual(sample(text, "ringkv_workers"), 2)
        self.assertEqual(sample(text, "ringkv_build_info", transport="h2" if H2 else "grpc"), 1)
        self.assertGreater(sample(text, "ringkv_persistence_log_bytes_total"), 0)
        self.assertEqual(sample(text, "ringkv_persistence_failed"), 0)
        self.assertIsNotNone(sample(text, "ringkv_ring_full_waits_total", shard="1"))
        if H2:
            self.assertEqual(sample(text, "ringkv_connections_refused_total",
                                    reason="max_connections"), 0)
            self.assertIsNotNone(sample(text, "ringkv_connections_open"))
            for reason in ("idle_timeout", "idle_evicted", "send_timeout"):
                self.assertEqual(sample(text, "ringkv_connections_closed_total", reason=reason), 0)
        # Nothing held once every answer is out; the limit is --max-reply-memory's default.
        self.assertEqual(sample(text, "ringkv_reply_memory_bytes"), 0)
        self.assertEqual(sample(text, "ringkv_reply_memory_limit_bytes"), 1 << 30)
        if os.environ.get("RINGKV_SANITIZER", "none") == "none":  # No jemalloc under one.
            self.assertGreater(sample(text, "ringkv_jemalloc_resident_bytes"), 0)
        # The two memory figures `ringkv stats` gives, with the same meaning: the process as
        # /proc counts it, and the sum of the shards' data.
        data = sample(text, "ringkv_data_memory_bytes")
        self.assertEqual(data, sum(sample(text, "ringkv_memory_bytes", shard=str(s))
                                   for s in range(2)))
        resident = sample(text, "ringkv_process_resident_memory_bytes")
        with open(f"/proc/{self.server.process.pid}/status") as f:
            vm_rss = int(re.search(r"VmRSS:\s+(\d+) kB", f.read())[1]) * 1024
        self.assertGreater(resident, data)
        self.assertLess(abs(resident - vm_rss), 0.1 * vm_rss, (resident, vm_rss))
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_1b_the_arena(self):
        # Records of 129 bytes to 16 KiB live in the arena; one overwritten at another size
        # leaves its old bytes dead there (under the 1 MiB that starts compaction). MultiPut:
        # test_2 counts Put calls.
        import grpc
        from ringkv.v1 import kv_pb2, kv_pb2_grpc

        def arena():
            text = http(self.base + "/metrics", token=TOKEN)[1]
            return [sum(sample(text, name, shard=str(s)) for s in range(2))
                    for name in ("ringkv_arena_bytes", "ringkv_arena_dead_bytes",
                                 "ringkv_compacted_bytes_total", "ringkv_table_bytes")]

        self.assertEqual(arena()[:3], [0, 0, 0])  # The 7 one-byte values are not in it.
        with grpc.insecure_channel(self.server.address) as channel:
            kv = kv_pb2_grpc.KVStub(channel)
            for size in (1000, 2000):
                items = [kv_pb2.KeyValue(key=b"arena%d" % i, value=b"x" * size)
                         for i in range(20)]
                kv.MultiPut(kv_pb2.MultiPutRequest(items=items), timeout=10)
        held, dead, compacted, table = arena()
        # What the segments hold: every record, live or dead (16 bytes of header, a key of 6 or
        # 7 bytes, the value, rounded to 16), and a 64-byte header per segment (one per shard),
        # not the part of a segment no record has reached yet.
        records = 20 * 1024 + 20 * 2032
        self.assertGreaterEqual(held, records + 64)
        self.assertLessEqual(held, records + 2 * 64)
        self.assertGreaterEqual(dead, 20 * 1000)  # The 1,000-byte records, overwritten.
        self.assertEqual(compacted, 0)
        self.assertGreater(table, 0)

    def test_2_a_real_prometheus_scrapes_it(self):
        port = free_port()
        target = self.base.removeprefix("http://")
        config = os.path.join(self.dir, "prometheus.yml")
        credentials = os.path.join(self.dir, "scrape-token")
        with open(credentials, "w") as f:
            f.write(TOKEN)
        # The job the README shows, and one without the token, which must be refused.
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n"
                    "  - job_name: ringkv\n"
                    "    authorization:\n      type: Bearer\n"
                    f"      credentials_file: {credentials}\n"
                    f"    static_configs:\n      - targets: ['{target}']\n"
                    "  - job_name: ringkv-no-token\n"
                    f"    static_configs:\n      - targets: ['{target}']\n")
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={config}",
             f"--storage.tsdb.path={os.path.join(self.dir, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            def query(expression):
                url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode(
                    {"query": expression})
                try:
                    status, body = http(url, timeout=2)
                except OSError:
                    return None  # Not up yet.
                result = json.loads(body)["data"]["result"] if status == 200 else []
                return float(result[0]["value"][1]) if result else None

            deadline = time.time() + 40
            up = calls = refused = None
            while time.time() < deadline and (up != 1 or calls != 7 or refused != 0):
                up = query('up{job="ringkv"}')
                calls = query('sum(ringkv_calls_total{job="ringkv",method="Put",code="OK"})')
                refused = query('up{job="ringkv-no-token"}')
                time.sleep(0.25)
            self.assertEqual((up, calls), (1, 7), "Prometheus never saw the target's calls")
            self.assertEqual(refused, 0, "a scrape without the token was not refused")
        finally:
            prometheus.send_signal(signal.SIGTERM)
            try:
                prometheus.wait(timeout=20)
            except subprocess.TimeoutExpired:
                prometheus.kill()
                prometheus.wait()
            prometheus.stderr.close()

    def test_3_http_edges(self):
        self.assertEqual(http(self.base + "/healthz"), (200, "ok\n"))
        self.assertEqual(http(self.base + "/nope")[0], 404)
        self.assertEqual(http(self.base + "/metrics", method="POST", token=TOKEN)[0], 405)
        # A client that connects and says nothing holds the endpoint 2 s at most.
        idle = socket.create_connection(("127.0.0.1", int(self.base.rsplit(":", 1)[1])))
        try:
            start = time.time()
            self.assertEqual(http(self.base + "/healthz")[0], 200)
            self.assertLess(time.time() - start, 5)
        finally:
            idle.close()

    def test_4_healthz_during_the_drain(self):
        import grpc
        from ringkv.v1 import kv_pb2, kv_pb2_grpc
        release = threading.Event()

        def ops():  # A Stream held open: a call in flight that the drain waits for.
            yield kv_pb2.StreamRequest(ops=[kv_pb2.StreamOp(id=1, type=kv_pb2.OP_TYPE_GET,
                                                            key=b"m1")])
            release.wait(timeout=20)

        channel = grpc.insecure_channel(self.server.address)
        responses = kv_pb2_grpc.KVStub(channel).Stream(ops(), timeout=30)
        next(responses)  # The stream is open and served.
        self.server.process.send_signal(signal.SIGTERM)
        deadline = time.time() + 3
        status = None
        while time.time() < deadline and status != 503:
            status = http(self.base + "/healthz")[0]
            time.sleep(0.05)
        self.assertEqual(status, 503)
        self.assertEqual(sample(http(self.base + "/metrics", token=TOKEN)[1], "ringkv_serving"), 0)
        release.set()
        list(responses)
        channel.close()
        self.assertEqual(self.server.process.wait(timeout=20), 0)


class ExposureTest(unittest.TestCase):
    """--metrics-listen on 0.0.0.0 (it still gets loopback traffic only here)."""

    WARNING = r"warning: metrics on 0\.0\.0\.0:0, which is not a loopback address.*--metrics-token-file"

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ringkv-metrics-exposure-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, *flags):
        server = RingkvServer(SERVER, "--threads=1", "--metrics-listen=0.0.0.0:0", *flags,
                              *SERVER_FLAGS)
        self.addCleanup(lambda: server.process.poll() is None and server.stop())
        log = LogReader(server)
        line = log.wait_for(r"metrics on http://0\.0\.0\.0:(\d+)/metrics")
        return server, log, "http://127.0.0.1:" + re.search(r":(\d+)/metrics", line).group(1)

    def test_warns_without_a_token_file(self):
        _, log, base = self.start()
        log.wait_for(self.WARNING)
        self.assertEqual(http(base + "/metrics")[0], 200)

    def test_no_warning_with_one_and_sighup_rereads_it(self):
        # One file for both flags: nothing special is needed.
        tokens = os.path.join(self.dir, "tokens")
        old, new = "old-metrics-token-0123456789", "new-metrics-token-0123456789"
        write_token_file(tokens, f"{old} read")
        server, log, base = self.start(f"--metrics-token-file={tokens}",
                                       f"--auth-token-file={tokens}")
        log.wait_for(r"metrics: 1 token from ")  # Logged after where the warning would be.
        self.assertFalse([line for line in log.lines if "not a loopback address" in line])
        self.assertEqual(http(base + "/metrics", token=old)[0], 200)

        write_token_file(tokens, f"{new} admin")
        server.process.send_signal(signal.SIGHUP)
        log.wait_for(r"SIGHUP: 1 metrics token in force from ")
        log.wait_for(r"SIGHUP: 1 token in force from ")  # The same file, as --auth-token-file.
        self.assertEqual(http(base + "/metrics", token=old)[0], 401)
        self.assertEqual(http(base + "/metrics", token=new)[0], 200)

        write_token_file(tokens, "not a token file")
        server.process.send_signal(signal.SIGHUP)
        log.wait_for(r"SIGHUP: .*line 1.*; the metrics tokens in force stay")
        self.assertEqual(http(base + "/metrics", token=new)[0], 200)
        self.assertEqual(http(base + "/healthz"), (200, "ok\n"))
        for line in log.lines:
            self.assertNotIn("0123456789", line)


if __name__ == "__main__":
    venv_main.run(TOOLS)
