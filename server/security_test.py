#!/usr/bin/env python3
"""Security of a real ringkv-server: TLS, token auth and the protected default.

- TLS (--tls-cert, --tls-key; certificates made at test time with the openssl CLI): the CLI,
  grpcurl (-cacert), Python grpcio (ssl_channel_credentials) and ringkv-loadgen connect;
  plaintext clients and clients that trust another CA are refused, and the server goes on
  serving. Mutual TLS (--tls-client-ca): clients with a certificate from the CA connect; one
  without a certificate, or with one from another CA, is refused. Bad files refuse the start.

- Token auth (--auth-token-file): each role's allowed and refused calls through Python grpcio
  metadata, grpcurl and the CLI (--token-file and RINGKV_TOKEN); Stream writes with a read
  token; a SIGHUP reload that adds and removes a token (on a connection that stays open); a bad
  file at reload keeps the old set; a bad file at start refuses the start; no token is ever
  logged, even at --log-level=debug.
- The protected default: a non-loopback --listen without tokens refuses to start, and starts
  with tokens or --insecure.

Usage: security_test.py SERVER_BINARY CLI_BINARY PROTO_DIR TOOLS_DIR [SERVER_FLAG...]
TOOLS_DIR holds what scripts/setup.sh installs (bin/grpcurl, venv/ with grpcio). The server
flags pick the transport (meson runs this once per transport). This script re-runs itself under
the venv's Python.
"""
import os
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "testing"))
import python_stubs  # noqa: E402
from ringkv_server import LogReader, RingkvServer  # noqa: E402
import venv_main  # noqa: E402
from certs import make_certificates  # noqa: E402

SERVER, CLI, PROTO_DIR, TOOLS = sys.argv[1:5] if len(sys.argv) >= 5 else (None,) * 4
SERVER_FLAGS = sys.argv[5:]

READ = "read-token-0123456789abcdef"
WRITE = "write-token-0123456789abcdef"
ADMIN = "admin-token-0123456789abcdef"
LATER = "later-token-0123456789abcdef"


def write_tokens(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


class SecurityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="ringkv-security-")
        cls.tokens = os.path.join(cls.dir, "tokens")
        write_tokens(cls.tokens, f"# ringkv tokens\n{READ} read\n{WRITE}  write\n\n"
                                 f"{ADMIN}\tadmin\n")
        python_stubs.generate(PROTO_DIR)

    def start(self, *args):
        server = RingkvServer(SERVER, "--threads=2", f"--auth-token-file={self.tokens}",
                              "--log-level=debug", *SERVER_FLAGS, *args)
        log = LogReader(server)

        def stop():
            server.stop()
            log.thread.join(timeout=5)
            text = "".join(log.lines)
            for token in (READ, WRITE, ADMIN, LATER):
                self.assertNotIn(token, text, "a token was logged")
        self.addCleanup(stop)
        return server, log

    def cli(self, server, *args, token=None, env_token=None):
        env = {k: v for k, v in os.environ.items() if k != "RINGKV_TOKEN"}
        if env_token is not None:
            env["RINGKV_TOKEN"] = env_token
        cmd = [CLI, f"--addr={server.address}"]
        if token is not None:
            path = os.path.join(self.dir, "cli-token")
            write_tokens(path, token + "\n")
            cmd.append(f"--token-file={path}")
        return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=30,
                              env=env)

    def assertCode(self, call, code):
        import grpc
        with self.assertRaises(grpc.RpcError) as raised:
            call()
        self.assertEqual(raised.exception.code(), code, raised.exception.details())
        return raised.exception.details()

    def test_roles_through_grpcio(self):
        import grpc
        from ringkv.v1 import kv_pb2, kv_pb2_grpc
        import health_pb2
        import health_pb2_grpc
        server, _ = self.start()
        with grpc.insecure_channel(server.address) as channel:
            kv = kv_pb2_grpc.KVStub(channel)
            auth = lambda token: [("authorization", f"Bearer {token}")]
            get = kv_pb2.GetRequest(key=b"k")
            put = kv_pb2.PutRequest(key=b"k", value=b"v")
            # Health checks stay open.
            health = health_pb2_grpc.HealthStub(channel)
            self.assertEqual(health.Check(health_pb2.HealthCheckRequest(), timeout=10).status,
                             health_pb2.HealthCheckResponse.SERVING)
            # No token, an unknown one, another scheme: UNAUTHENTICATED.
            details = self.assertCode(lambda: kv.Get(get, timeout=10),
                                      grpc.StatusCode.UNAUTHENTICATED)
            self.assertIn("authorization: Bearer", details)
            self.assertCode(lambda: kv.Get(get, timeout=10, metadata=auth("x" * 30)),
                            grpc.StatusCode.UNAUTHENTICATED)
            self.assertCode(lambda: kv.Get(get, timeout=10,
                                           metadata=[("authorization", f"Basic {READ}")]),
                            grpc.StatusCode.UNAUTHENTICATED)
            # read: reads only.
            self.assertCode(lambda: kv.Get(get, timeout=10, metadata=auth(READ)),
                            grpc.StatusCode.NOT_FOUND)
            kv.Stats(kv_pb2.StatsRequest(), timeout=10, metadata=auth(READ))
            kv.Scan(kv_pb2.ScanRequest(), timeout=10, metadata=auth(READ))
            details = self.assertCode(lambda: kv.Put(put, timeout=10, metadata=auth(READ)),
                                      grpc.StatusCode.PERMISSION_DENIED)
            self.assertIn("needs the write role; the token has read", details)
            self.assertCode(lambda: kv.Get(get, timeout=10, metadata=auth(READ)),
                            grpc.StatusCode.NOT_FOUND)  # The refused Put stored nothing.
            # write: and writes; the scheme's case does not matter.
            kv.Put(put, timeout=10, metadata=[("authorization", f"bearer {WRITE}")])
            self.assertEqual(kv.Get(get, timeout=10, metadata=auth(READ)).value, b"v")
            self.assertCode(lambda: kv.Snapshot(kv_pb2.SnapshotRequest(), timeout=10,
                                                metadata=auth(WRITE)),
                            grpc.StatusCode.PERMISSION_DENIED)
            # admin: Snapshot gets past auth (and then needs --data-dir).
            self.assertCode(lambda: kv.Snapshot(kv_pb2.SnapshotRequest(), timeout=10,
                                                metadata=auth(ADMIN)),
                            grpc.StatusCode.FAILED_PRECONDITION)
            # Stream: read opens it and reads; each write needs write.
            ops = kv_pb2.StreamRequest(ops=[
                kv_pb2.StreamOp(id=1, type=kv_pb2.OP_TYPE_GET, key=b"k"),
                kv_pb2.StreamOp(id=2, type=kv_pb2.OP_TYPE_PUT, key=b"k", value=b"no"),
                kv_pb2.StreamOp(id=3, type=kv_pb2.OP_TYPE_INCREMENT, key=b"n", delta=1)])
            results = {}
            for response in kv.Stream(iter([ops]), timeout=10, metadata=auth(READ)):
                for r in response.results:
                    results[r.id] = r.result
            self.assertEqual(results[1].value, b"v")
            self.assertEqual(results[2].code, grpc.StatusCode.PERMISSION_DENIED.value[0])
            self.assertIn("needs the write role", results[2].message)
            self.assertEqual(results[3].code, grpc.StatusCode.PERMISSION_DENIED.value[0])
            self.assertEqual(kv.Get(get, timeout=10, metadata=auth(READ)).value, b"v")
            self.assertCode(lambda: list(kv.Stream(iter([ops]), timeout=10)),
                            grpc.StatusCode.UNAUTHENTICATED)

    def test_grpcurl_reflection_needs_read(self):
        server, _ = self.start()
        grpcurl = [os.path.join(TOOLS, "bin", "grpcurl"), "-plaintext", "-max-time", "10"]
        r = subprocess.run(grpcurl + [server.address, "list"], capture_output=True, text=True,
                           timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("Unauthenticated", r.stderr)
        r = subprocess.run(grpcurl + ["-H", f"authorization: Bearer {READ}", server.address,
                                      "list"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ringkv.v1.KV", r.stdout)

    def test_cli_tokens(self):
        server, _ = self.start()
        r = self.cli(server, "put", "c", "1")
        self.assertEqual(r.returncode, 5, r.stderr)
        self.assertIn("authorization: Bearer", r.stderr)
        r = self.cli(server, "put", "c", "1", env_token=READ)
        self.assertEqual(r.returncode, 5, r.stderr)
        self.assertIn("needs the write role", r.stderr)
        r = self.cli(server, "put", "c", "1", token=f"{WRITE} write")  # A server file's line.
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.cli(server, "get", "c", env_token=READ)
        self.assertEqual((r.returncode, r.stdout), (0, "1"), r.stderr)
        # --token-file wins over RINGKV_TOKEN.
        r = self.cli(server, "put", "c", "2", token=WRITE, env_token=READ)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.cli(server, "get", "c", token="y" * 20)
        self.assertEqual(r.returncode, 5, r.stderr)
        self.assertIn("unknown token", r.stderr)
        r = subprocess.run([CLI, f"--addr={server.address}",
                            f"--token-file={self.dir}/missing", "get", "c"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("missing", r.stderr)

    def test_sighup_reload(self):
        import grpc
        from ringkv.v1 import kv_pb2, kv_pb2_grpc
        tokens = os.path.join(self.dir, "reload-tokens")
        write_tokens(tokens, f"{READ} read\n{WRITE} write\n")
        server, log = self.start(f"--auth-token-file={tokens}")
        with grpc.insecure_channel(server.address) as channel:
            kv = kv_pb2_grpc.KVStub(channel)
            put = lambda token: kv.Put(kv_pb2.PutRequest(key=b"r", value=b"v"), timeout=10,
                                       metadata=[("authorization", f"Bearer {token}")])
            put(WRITE)
            self.assertCode(lambda: put(LATER), grpc.StatusCode.UNAUTHENTICATED)
            # Add LATER, drop WRITE: the same connection sees the change at once.
            write_tokens(tokens, f"{READ} read\n{LATER} write\n")
            server.process.send_signal(signal.SIGHUP)
            log.wait_for(r"SIGHUP: 2 tokens in force")
            put(LATER)
            self.assertCode(lambda: put(WRITE), grpc.StatusCode.UNAUTHENTICATED)
            # A file that cannot be parsed keeps the set in force, with one line saying why.
            write_tokens(tokens, f"{READ} read\n{WRITE} superuser\n")
            server.process.send_signal(signal.SIGHUP)
            line = log.wait_for(r"SIGHUP: .*the tokens in force stay")
            self.assertIn("line 2: unknown role 'superuser'", line)
            put(LATER)
            self.assertCode(lambda: put(WRITE), grpc.StatusCode.UNAUTHENTICATED)
            os.remove(tokens)
            server.process.send_signal(signal.SIGHUP)
            log.wait_for(r"SIGHUP: cannot read token file .*the tokens in force stay")
            put(LATER)

    def run_server(self, *args):
        return subprocess.run([SERVER, *SERVER_FLAGS, *args], capture_output=True, text=True,
                              timeout=30)

    def test_bad_token_file_refuses_the_start(self):
        bad = os.path.join(self.dir, "bad-tokens")
        for text, why in ((f"{READ} read\nshort write\n", "line 2: a token must be 16"),
                          (f"{READ} read\n{READ} admin\n", "line 2: the same token"),
                          ("# nothing\n", "no tokens"),
                          (f"{READ}\n", "line 1: expected TOKEN ROLE")):
            write_tokens(bad, text)
            r = self.run_server("--listen=127.0.0.1:0", f"--auth-token-file={bad}")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(f"token file {bad}, {why}", r.stderr)
            self.assertNotIn(READ, r.stderr)

    def test_protected_default(self):
        for listen in ("0.0.0.0:0", "[::]:0", ":0"):
            r = self.run_server(f"--listen={listen}")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(f"refusing to listen on {listen}, which is not a loopback address",
                          r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        # Loopback needs nothing; a non-loopback address starts with tokens or --insecure.
        for args in (["--listen=localhost:0"], ["--listen=[::1]:0"],
                     ["--listen=0.0.0.0:0", f"--auth-token-file={self.tokens}"],
                     ["--listen=0.0.0.0:0", "--insecure"]):
            process = subprocess.Popen([SERVER, *SERVER_FLAGS, *args], stderr=subprocess.PIPE,
                                       text=True)
            try:
                lines = []
                while not lines or "listening on" not in lines[-1]:
                    lines.append(process.stderr.readline())
                    self.assertTrue(lines[-1], f"{args}: no 'listening on' line in {lines}")
                if "--auth-token-file" in " ".join(args):
                    self.assertIn("tokens go in the clear without TLS", lines[0])
            finally:
                process.send_signal(signal.SIGTERM)
                self.assertEqual(process.wait(timeout=10), 0)
                process.stderr.close()


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="ringkv-tls-")
        make_certificates(cls.dir)
        python_stubs.generate(PROTO_DIR)

    def path(self, name):
        return os.path.join(self.dir, name)

    def read(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()

    def start(self, *args):
        server = RingkvServer(SERVER, f"--tls-cert={self.path('server.pem')}",
                              f"--tls-key={self.path('server.key')}", "--log-level=debug",
                              *SERVER_FLAGS, *args)
        log = LogReader(server)

        def stop():
            server.stop()
            log.thread.join(timeout=5)
        self.addCleanup(stop)
        return server, log

    def cli(self, server, *args):
        return subprocess.run([CLI, f"--addr={server.address}", *args], capture_output=True,
                              text=True, timeout=30)

    def grpcurl(self, server, *args):
        return subprocess.run([os.path.join(TOOLS, "bin", "grpcurl"), "-max-time", "10", *args,
                               server.address, "list"], capture_output=True, text=True,
                              timeout=30)

    def grpcio_put(self, server, credentials, value=b"tls"):
        import grpc
        from ringkv.v1 import kv_pb2, kv_pb2_grpc
        channel = (grpc.secure_channel(server.address, credentials) if credentials
                   else grpc.insecure_channel(server.address))
        with channel:
            kv = kv_pb2_grpc.KVStub(channel)
            kv.Put(kv_pb2.PutRequest(key=b"py", value=value), timeout=10)
            return kv.Get(kv_pb2.GetRequest(key=b"py"), timeout=10).value

    def test_tls(self):
        import grpc
        server, log = self.start()
        ca = f"--tls-ca={self.path('ca.pem')}"
        r = self.cli(server, ca, "put", "k", "v")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.cli(server, ca, "get", "k")
        self.assertEqual((r.returncode, r.stdout), (0, "v"), r.stderr)
        r = self.grpcurl(server, "-cacert", self.path("ca.pem"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ringkv.v1.KV", r.stdout)
        creds = grpc.ssl_channel_credentials(root_certificates=self.read("ca.pem"))
        self.assertEqual(self.grpcio_put(server, creds), b"tls")
        # A large value, which the h2 transport shares from its buffer into the connection's
        # output, goes through OpenSSL a piece at a time.
        large = os.urandom(300_000)
        self.assertEqual(self.grpcio_put(server, creds, large), large)
        # Refused: plaintext on the TLS port, and a client that trusts another CA.
        r = self.cli(server, "get", "k")
        self.assertEqual(r.returncode, 3, r.stderr)
        r = self.cli(server, f"--tls-ca={self.path('other-ca.pem')}", "get", "k")
        self.assertEqual(r.returncode, 3, r.stderr)
        r = self.grpcurl(server, "-plaintext")
        self.assertNotEqual(r.returncode, 0)
        with self.assertRaises(grpc.RpcError) as raised:
            self.grpcio_put(server, None)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE)
        if "--transport=grpc" not in SERVER_FLAGS:
            log.wait_for(r"debug: refused a TLS handshake")
        # The refusals cost the others nothing.
        r = self.cli(server, ca, "get", "k")
        self.assertEqual((r.returncode, r.stdout), (0, "v"), r.stderr)
        loadgen = os.environ.get("RINGKV_LOADGEN")
        for client in ("h2", "grpc") if loadgen else ():
            r = subprocess.run([loadgen, f"--addr={server.address}", ca, f"--client={client}",
                                "--keys=100", "--ops=2000", "--connections=2", "--concurrency=8",
                                "--ratio=1:1", "--progress=false"], capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, r"errors 0\n")

    def test_mutual_tls(self):
        import grpc
        server, _ = self.start(f"--tls-client-ca={self.path('ca.pem')}")
        ca = f"--tls-ca={self.path('ca.pem')}"
        client = [f"--tls-cert={self.path('client.pem')}", f"--tls-key={self.path('client.key')}"]
        r = self.cli(server, ca, *client, "put", "m", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.grpcurl(server, "-cacert", self.path("ca.pem"), "-cert", self.path("client.pem"),
                         "-key", self.path("client.key"))
        self.assertEqual(r.returncode, 0, r.stderr)
        creds = grpc.ssl_channel_credentials(root_certificates=self.read("ca.pem"),
                                             private_key=self.read("client.key"),
                                             certificate_chain=self.read("client.pem"))
        self.assertEqual(self.grpcio_put(server, creds), b"tls")
        # Refused: no client certificate, and one from a CA the server does not trust.
        r = self.cli(server, ca, "get", "m")
        self.assertEqual(r.returncode, 3, r.stderr)
        r = self.cli(server, ca, f"--tls-cert={self.path('stranger.pem')}",
                     f"--tls-key={self.path('stranger.key')}", "get", "m")
        self.assertEqual(r.returncode, 3, r.stderr)
        r = self.grpcurl(server, "-cacert", self.path("ca.pem"))
        self.assertNotEqual(r.returncode, 0)
        with self.assertRaises(grpc.RpcError) as raised:
            self.grpcio_put(server, grpc.ssl_channel_credentials(
                root_certificates=self.read("ca.pem")))
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE)
        r = self.cli(server, ca, *client, "get", "m")
        self.assertEqual((r.returncode, r.stdout), (0, "1"), r.stderr)

    def test_bad_files_refuse_the_start(self):
        for args, why in (
                ([f"--tls-cert={self.path('server.pem')}", f"--tls-key={self.path('nope')}"],
                 "--tls-key: cannot read"),
                ([f"--tls-cert={self.path('server.pem')}", f"--tls-key={self.path('client.key')}"],
                 "does not match the certificate"),
                ([f"--tls-cert={self.path('server.ext')}", f"--tls-key={self.path('server.key')}"],
                 "--tls-cert: no certificate in"),
                ([f"--tls-cert={self.path('server.pem')}"], "--tls-cert and --tls-key go together"),
                ([f"--tls-client-ca={self.path('ca.pem')}"], "--tls-client-ca needs --tls-cert")):
            r = subprocess.run([SERVER, "--listen=127.0.0.1:0", *SERVER_FLAGS, *args],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(why, r.stderr)

    def test_tls_satisfies_the_protected_default(self):
        process = subprocess.Popen(
            [SERVER, *SERVER_FLAGS, "--listen=0.0.0.0:0", f"--tls-cert={self.path('server.pem')}",
             f"--tls-key={self.path('server.key')}"], stderr=subprocess.PIPE, text=True)
        try:
            lines = []
            while not lines or "listening on" not in lines[-1]:
                lines.append(process.stderr.readline())
                self.assertTrue(lines[-1], f"no 'listening on' line in {lines}")
            self.assertIn("TLS without tokens or client certificates", lines[0])
        finally:
            process.send_signal(signal.SIGTERM)
            self.assertEqual(process.wait(timeout=10), 0)
            process.stderr.close()


if __name__ == "__main__":
    venv_main.run(TOOLS, needs=("bin/grpcurl",))
