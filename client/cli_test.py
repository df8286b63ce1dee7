#!/usr/bin/env python3
"""End-to-end test of the `ringkv` CLI against a real ringkv-server on a free loopback port.

Usage: cli_test.py SERVER_BINARY CLI_BINARY [SERVER_FLAG...]
Each command's output and exit code is checked: 0 ok, 1 not found, 2 usage (nothing sent),
3 server or connection error, 4 the server refused the operation (nothing written).
RINGKV_SERVER_FAULTS (ringkv-server-faults) gives a server whose log fills.
The server flags pick the transport (meson runs this once per transport).
"""
import json
import os
import pty
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server", "testing"))
from ringkv_server import RingkvServer  # noqa: E402

SERVER = CLI = None
SERVER_FLAGS = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = RingkvServer(SERVER, "--threads=2", *SERVER_FLAGS)
        cls.addClassCleanup(cls.server.stop)
        cls.addr = cls.server.address

    def cli(self, *args, stdin=None, addr=None):
        return subprocess.run([CLI, f"--addr={addr or self.addr}", *args], input=stdin,
                              capture_output=True, timeout=30)

    def test_put_get_del(self):
        r = self.cli("put", "cli:k", "hello")
        self.assertEqual((r.returncode, r.stdout), (0, b"OK\n"), r.stderr)
        r = self.cli("get", "cli:k")
        self.assertEqual((r.returncode, r.stdout), (0, b"hello"))
        r = self.cli("--json", "get", "cli:k")
        got = json.loads(r.stdout)
        self.assertEqual((got["key"], got["value"], got["ttl_ms"]), ("cli:k", "hello", -1))
        self.assertGreater(got["version"], 0)
        self.assertEqual(self.cli("del", "cli:k").returncode, 0)
        r = self.cli("get", "cli:k")
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"key not found: cli:k", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1)
        self.assertEqual(self.cli("del", "cli:k").returncode, 1)

    def test_conditions_ttls_and_counters(self):
        put = json.loads(self.cli("--json", "put", "cli:c", "1").stdout)
        r = self.cli("put", "--if-absent", "cli:c", "2")
        self.assertEqual(r.returncode, 4)
        self.assertIn(f"version is {put['version']}".encode(), r.stderr)
        r = self.cli("put", f"--if-version={put['version']}", "cli:c", "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        got = json.loads(self.cli("--json", "get", "cli:c").stdout)
        self.assertEqual(got["value"], "2")
        self.assertGreater(got["version"], put["version"])
        self.assertEqual(got["ttl_ms"], -1)
        self.assertEqual(self.cli("del", f"--if-version={put['version']}", "cli:c").returncode, 4)
        self.assertEqual(self.cli("get", "cli:c").stdout, b"2")

        self.assertEqual(self.cli("incr", "cli:c").stdout, b"3\n")
        self.assertEqual(self.cli("incr", "cli:c", "-10").stdout, b"-7\n")
        r = self.cli("incr", "cli:c", "ten")
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"not a 64-bit integer", r.stderr)
        self.cli("put", "cli:text", "abc")
        r = self.cli("incr", "cli:text")
        self.assertEqual(r.returncode, 4)  # Refused by the server, not a usage error.
        self.assertIn(b"not a decimal 64-bit integer", r.stderr)
        self.cli("put", "cli:big", str(2**63 - 1))
        r = self.cli("incr", "cli:big")
        self.assertEqual(r.returncode, 4)
        self.assertIn(b"would not fit in a 64-bit integer", r.stderr)
        self.assertEqual(self.cli("get", "cli:big").stdout, str(2**63 - 1).encode())

        self.assertEqual(self.cli("put", "--ttl=1h", "cli:t", "v").returncode, 0)
        ttl = int(self.cli("ttl", "cli:t").stdout)
        self.assertTrue(3_500_000 < ttl <= 3_600_000, ttl)
        self.assertEqual(self.cli("expire", "cli:t", "30").returncode, 0)
        self.assertTrue(29_000 < int(self.cli("ttl", "cli:t").stdout) <= 30_000)
        self.assertEqual(self.cli("persist", "cli:t").returncode, 0)
        self.assertEqual(self.cli("ttl", "cli:t").stdout, b"-1\n")
        self.assertEqual(self.cli("ttl", "cli:none").returncode, 1)
        self.assertEqual(self.cli("expire", "cli:none", "5").returncode, 1)
        self.assertEqual(self.cli("put", "--ttl=200ms", "cli:short", "v").returncode, 0)
        time.sleep(0.3)
        self.assertEqual(self.cli("get", "cli:short").returncode, 1)

    def test_scan(self):
        self.cli("mput", *[f"scan:{i}=v" for i in range(25)], "other=v")
        r = self.cli("scan", "--prefix=scan:")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(r.stdout.split()), sorted(f"scan:{i}".encode() for i in range(25)))
        first = json.loads(self.cli("--json", "scan", "--prefix=scan:", "--limit=10").stdout)
        self.assertEqual(len(first["keys"]), 10)
        self.assertNotEqual(first["cursor"], 0)
        rest = self.cli("scan", "--prefix=scan:", f"--cursor={first['cursor']}").stdout.split()
        self.assertEqual(sorted(first["keys"] + [k.decode() for k in rest]),
                         sorted(f"scan:{i}" for i in range(25)))
        r = self.cli("scan", "--limit=3")
        self.assertIn(b"--cursor=", r.stderr)

    def test_binary_value_through_stdin(self):
        value = bytes(range(256)) * 64 + b"\x00\n\xff"
        r = self.cli("put", "cli:bin", "-", stdin=value)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.cli("get", "cli:bin")
        self.assertEqual(r.stdout, value)
        r = self.cli("--json", "get", "cli:bin")
        decoded = json.loads(r.stdout)["value"].encode("latin-1")
        self.assertEqual(decoded, value)

    def test_mput_mget(self):
        r = self.cli("mput", "m1=a", "m2=b=c", "m3=")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"m1\tOK\nm2\tOK\nm3\tOK\n")
        r = self.cli("mget", "m1", "m2", "m3", "missing")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, b"m1\ta\nm2\tb=c\nm3\t\nmissing\t(not found)\n")
        r = self.cli("--json", "mget", "m1", "missing")
        first = json.loads(r.stdout)[0]
        self.assertEqual((first["key"], first["value"]), ("m1", "a"))
        self.assertGreater(first["version"], 0)
        self.assertIn("error", json.loads(r.stdout)[1])
        r = self.cli("mput", "ok=1", "=empty-key")
        self.assertEqual(r.returncode, 4)
        self.assertIn(b"(error: key is empty", r.stdout)

    def test_stats(self):
        self.cli("put", "stats:k", "v")
        r = self.cli("stats")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"engine ring (spsc rings)", r.stdout)
        # The process's resident memory first, then the data as --max-memory counts it.
        self.assertRegex(r.stdout, rb"\nmemory: [0-9.]+ MiB resident \(the process\), [0-9.]+ MiB "
                                   rb"of data \(the shards, as --max-memory counts\), jemalloc heap")
        stats = json.loads(self.cli("--json", "stats").stdout)
        self.assertEqual(len(stats["shards"]), 2)
        self.assertGreaterEqual(sum(int(s["keys"]) for s in stats["shards"]), 1)
        self.assertEqual(int(stats["data_memory_bytes"]),
                         sum(int(s["memory_bytes"]) for s in stats["shards"]))
        self.assertGreater(int(stats["process_resident_bytes"]), int(stats["data_memory_bytes"]))

    def test_snapshot(self):
        r = self.cli("snapshot")  # This server keeps nothing on disk.
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn(b"without --data-dir", r.stderr)
        with tempfile.TemporaryDirectory() as data:
            server = RingkvServer(SERVER, "--threads=2", f"--data-dir={data}", *SERVER_FLAGS)
            self.addCleanup(server.stop)
            self.assertEqual(self.cli("mput", "a=1", "b=2", addr=server.address).returncode, 0)
            r = self.cli("snapshot", addr=server.address)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, rb"^snapshot 2: 2 keys, [\d.]+ MiB, durable in [\d.]+ s\n$")
            snapshot = json.loads(self.cli("--json", "snapshot", addr=server.address).stdout)
            self.assertEqual((snapshot["generation"], snapshot["keys"]), (3, 2))
            self.assertIn("snap-000000000003-0001.rkv", os.listdir(data))
            self.assertNotIn("snap-000000000002-0001.rkv", os.listdir(data))
            r = self.cli("stats", addr=server.address)
            self.assertIn(b", 2 keys, ", r.stdout)
            server.stop()  # Before its directory goes (it takes a snapshot at exit).

    def test_usage_errors_exit_2(self):
        for args in (["get"], ["put", "k"], ["frobnicate"], [], ["--bogus", "get", "k"],
                     ["--timeout=-1", "get", "k"], ["mput", "novalue"], ["incr", "k", "1", "2"],
                     ["--ttl=0", "put", "k", "v"], ["--ttl=soon", "put", "k", "v"],
                     ["--ttl=5s", "get", "k"], ["--if-version=1", "mput", "k=v"],
                     ["--if-absent", "--if-present", "put", "k", "v"], ["expire", "k", "-1s"],
                     ["--prefix=a", "get", "k"], ["scan", "extra"]):
            r = self.cli(*args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, (args, r.stderr))

    def test_input_the_server_refuses_exits_4(self):
        r = self.cli("put", "", "v")
        self.assertEqual(r.returncode, 4)
        self.assertIn(b"key is empty", r.stderr)
        r = self.cli("put", "k" * 5000, "v")
        self.assertEqual(r.returncode, 4)
        self.assertIn(b"--max-key-bytes=4096", r.stderr)

    def test_get_ends_its_line_on_a_terminal_only(self):
        self.cli("put", "cli:tty", "on a terminal")
        pid, fd = pty.fork()
        if pid == 0:
            os.execv(CLI, [CLI, f"--addr={self.addr}", "get", "cli:tty"])
        out = b""
        while True:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO once the child has exited.
                break
            if not chunk:
                break
            out += chunk
        os.close(fd)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0, out)
        self.assertEqual(out, b"on a terminal\r\n")  # The terminal turns \n into \r\n.
        self.assertEqual(self.cli("get", "cli:tty").stdout, b"on a terminal")  # A pipe: raw.

    def test_unavailable_says_cannot_reach_only_when_it_could_not(self):
        r = self.cli("get", "k", addr=f"127.0.0.1:{free_port()}")
        self.assertEqual(r.returncode, 3)
        self.assertIn(b"cannot reach ringkv-server at", r.stderr)
        faults = os.environ.get("RINGKV_SERVER_FAULTS")
        if not faults:
            self.skipTest("RINGKV_SERVER_FAULTS is not set")
        with tempfile.TemporaryDirectory() as data:
            server = RingkvServer(faults, "--threads=1", f"--data-dir={data}", "--fsync=always",
                                  "--fault-log-fail-after-bytes=2000", *SERVER_FLAGS)
            self.addCleanup(server.stop)
            refused = None
            for i in range(100):  # Until the full log refuses a write (one waits, held).
                r = self.cli("--timeout=1", "put", f"k{i}", "v" * 100, addr=server.address)
                if r.returncode != 0 and b"no answer" not in r.stderr:
                    refused = r
                    break
            self.assertIsNotNone(refused)
            self.assertEqual(refused.returncode, 3, refused.stderr)
            self.assertNotIn(b"cannot reach", refused.stderr)
            self.assertIn(f"ringkv-server at {server.address}: not stored".encode(), refused.stderr)
            self.assertIn(b"out of space", refused.stderr)
            server.stop()

    def test_help_lists_the_flags_and_exits_0(self):
        r = subprocess.run([CLI, "--help"], capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        for flag in (b"--addr", b"--json", b"--timeout", b"--ttl", b"--if_absent", b"--if_present",
                     b"--if_version"):
            self.assertIn(flag, r.stdout)
        r = subprocess.run([SERVER, "--help"], capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        for flag in (b"--listen", b"--transport", b"--threads", b"--ring", b"--engine",
                     b"--max_key_bytes", b"--max_value_bytes", b"--max_connections",
                     b"--max_concurrent_streams", b"--idle_timeout", b"--poll_mode", b"--log_level", b"--max_memory",
                     b"--eviction"):
            self.assertIn(flag, r.stdout)

    def test_version_names_the_release_and_the_commit(self):
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, cwd=os.path.dirname(os.path.abspath(__file__)))
        for program in (SERVER, CLI):
            r = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            name = os.path.basename(program)
            self.assertRegex(r.stdout, rf"^{name} \d+\.\d+\.\d+ \(commit [0-9a-f]{{12}}"
                                       rf"(-dirty)?\)\n$")
            if head.returncode == 0:  # Built from this checkout: its commit.
                self.assertIn(head.stdout.strip(), r.stdout)

    def test_a_full_max_memory_exits_3_with_the_servers_message(self):
        server = RingkvServer(SERVER, "--threads=1", "--max-memory=1MiB", *SERVER_FLAGS)
        self.addCleanup(server.stop)
        r = self.cli("put", "big", "-", stdin=b"x" * (2 << 20), addr=server.address)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn(b"--max-memory", r.stderr)
        self.assertEqual(self.cli("get", "big", addr=server.address).returncode, 1)
        self.assertEqual(self.cli("put", "small", "v", addr=server.address).returncode, 0)
        r = self.cli("stats", addr=server.address)
        self.assertIn(b"max memory: 1.0 MiB, eviction noeviction", r.stdout)

    def test_unreachable_server_exits_3_and_names_the_address(self):
        addr = f"127.0.0.1:{free_port()}"
        r = self.cli("--timeout=2", "get", "k", addr=addr)
        self.assertEqual(r.returncode, 3)
        self.assertIn(addr.encode(), r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)


if __name__ == "__main__":
    SERVER, CLI, SERVER_FLAGS = sys.argv[1], sys.argv[2], sys.argv[3:]
    unittest.main(argv=sys.argv[:1], verbosity=2)
