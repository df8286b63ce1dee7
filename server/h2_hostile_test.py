#!/usr/bin/env python3
"""The gRPC-over-HTTP/2 protocol at its edges, and hostile input, against a real ringkv-server.

Clients: raw sockets for bytes that are not HTTP/2 at all, and the `h2` library from PyPI (an
HTTP/2 implementation of its own, with its own HPACK) for well-formed HTTP/2 carrying bad gRPC.
Every test ends by checking that the server still serves others (the `ringkv` CLI).

- ProtocolTest: what the h2 transport answers for each kind of bad call: unknown method, not
  POST, not gRPC, compressed, oversized, unparsable or truncated messages, a passed deadline
  (the work is dropped), oversized headers, a reset in the middle of a call.
- HostileBytesTest: random and truncated bytes, bad frames, floods; the server answers with
  GOAWAY or closes, and stays up.
- IdleTimeoutTest: --idle-timeout closes an idle connection with a GOAWAY, and no busy one.
- SendTimeoutTest: --send-timeout closes a connection whose answers nobody takes, and no slow
  one.
- ResourceTest, each with a server of its own: clients that never read, descriptor exhaustion
  and recovery, --max-connections (idle connections make room, busy ones do not), 10,000 open
  connections.

Usage: h2_hostile_test.py SERVER_BINARY CLI_BINARY TOOLS_DIR [SERVER_FLAG...]
The server flags pick the transport; tests of what only the h2 transport promises are skipped
for --transport=grpc. This script re-runs itself under TOOLS_DIR's venv (for `h2`).
"""
import os
import random
import resource
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "testing"))
from h2_client import Call, field, grpc_message, put_request  # noqa: E402
from ringkv_server import RingkvServer  # noqa: E402
import venv_main  # noqa: E402

SERVER, CLI, TOOLS = sys.argv[1:4] if len(sys.argv) >= 4 else (None, None, None)
SERVER_FLAGS = sys.argv[4:]
GRPCPP = "--transport=grpc" in SERVER_FLAGS  # grpc++ answers; some promises are h2's.
# Under a sanitizer, resident memory says little (ASan keeps freed memory in quarantine).
SANITIZED = os.environ.get("RINGKV_SANITIZER", "none") not in ("", "none")

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0, 1, 3, 4, 6, 7, 8, 9)
END_STREAM, END_HEADERS = 0x1, 0x4


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
        struct.pack(">I", stream) + payload


def get_value(data):
    """The value of the one GetResponse in gRPC message bytes (field 1 first, as ringkv
    writes it)."""
    _, length = struct.unpack(">BI", data[:5])
    number, value = fields(data[5:5 + length])[0]
    assert number == 1, number
    return value


def fields(message):
    """(number, value) of each field of protobuf bytes: an int for a varint, bytes for a
    length-delimited field."""
    out, i = [], 0

    def varint():
        nonlocal i
        value, shift = 0, 0
        while True:
            byte = message[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while i < len(message):
        key = varint()
        if key & 7 == 0:
            out.append((key >> 3, varint()))
        elif key & 7 == 2:
            size = varint()
            out.append((key >> 3, message[i:i + size]))
            i += size
        else:
            raise AssertionError(f"wire type {key & 7} at {i}")
    return out


def multi_get_values(data):
    """Each item of the one MultiGetResponse in gRPC message bytes: its value, or its code if
    it has none."""
    _, length = struct.unpack(">BI", data[:5])
    assert len(data) == 5 + length, (len(data), length)
    items = []
    for number, item in fields(data[5:]):
        assert number == 1, number
        item = dict(fields(item))
        items.append(item.get(3, item.get(1, 0)))
    return items


def stream_gets(key, ids):
    """A StreamRequest of a GET of `key` for each id (ids under 128)."""
    return b"".join(field(1, bytes([1 << 3, i, 2 << 3, 1]) + field(3, key)) for i in ids)


def stream_results(data):
    """id -> (code, value or message) of each result in gRPC messages of StreamResponses."""
    results = {}
    while len(data) >= 5 and len(data) >= 5 + struct.unpack(">I", data[1:5])[0]:  # Whole ones.
        _, length = struct.unpack(">BI", data[:5])
        for number, result in fields(data[5:5 + length]):
            assert number == 1, number
            result = dict(fields(result))
            item = dict(fields(result.get(2, b"")))
            code = item.get(1, 0)
            results[result.get(1, 0)] = (code, item.get(2 if code else 3, b""))
        data = data[5 + length:]
    return results


def read_frames(sock, seconds=3.0):
    """Frames the server sends until it closes the connection or `seconds` pass."""
    sock.settimeout(seconds)
    data = b""
    deadline = time.time() + seconds
    try:
        while time.time() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    frames = []
    while len(data) >= 9:
        length = int.from_bytes(data[:3], "big")
        if len(data) < 9 + length:
            break
        frames.append((data[3], data[4], int.from_bytes(data[5:9], "big") & 0x7FFFFFFF,
                       data[9:9 + length]))
        data = data[9 + length:]
    return frames


def rss_kib(pid, field="VmRSS"):
    """Resident memory now (VmRSS), or at its peak (VmHWM)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def request_headers(path):
    """A self-contained HPACK block (no dynamic-table references) for a gRPC call to `path`,
    so that one block may open any number of streams. "te: trailers" as gRPC's spec asks
    (grpc++ refuses a call without it)."""
    import hpack
    return hpack.Encoder().encode([(":method", "POST"), (":scheme", "http"), (":path", path),
                                   (":authority", "x"), ("content-type", "application/grpc"),
                                   ("te", "trailers")])


class RawConnection:
    """A socket that sent HTTP/2's preface, and the frames the server has sent on it so far."""

    def __init__(self, port, window=None, rcvbuf=None):
        """`window`: the initial stream window it grants (SETTINGS); `rcvbuf`: its socket's
        receive buffer, set before it connects (the kernel's TCP window follows it)."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(5)
        self.sock.connect(("127.0.0.1", port))
        settings = b"" if window is None else struct.pack(">HI", 4, window)
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings))
        self.buffer, self.frames, self.closed = b"", [], False
        self.next_stream = 1

    def open_call(self, path, body=None):
        """Starts a call; with `body`, sends it and ends the stream (a unary call), without,
        leaves the call open. Returns the stream id."""
        stream = self.next_stream
        self.next_stream += 2
        out = frame(HEADERS, END_HEADERS, stream, request_headers(path))
        if body is not None:
            out += frame(DATA, END_STREAM, stream, body)
        self.sock.sendall(out)
        return stream

    def receive(self, seconds=0.0):
        """Reads what the server sent within `seconds` (or what is there now); False once the
        server has closed the connection."""
        deadline = time.time() + seconds
        while not self.closed:
            self.sock.settimeout(max(0.001, deadline - time.time()))
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                self.closed = True
                break
            self.buffer += chunk
            while len(self.buffer) >= 9:
                length = int.from_bytes(self.buffer[:3], "big")
                if len(self.buffer) < 9 + length:
                    break
                b = self.buffer
                self.frames.append((b[3], b[4], int.from_bytes(b[5:9], "big") & 0x7FFFFFFF,
                                    b[9:9 + length]))
                self.buffer = b[9 + length:]
        return not self.closed

    def goaways(self):
        """(error code, debug data) of each GOAWAY received."""
        return [(int.from_bytes(f[3][4:8], "big"), f[3][8:]) for f in self.frames
                if f[0] == GOAWAY]

    def ended(self, stream):
        """Whether the server ended `stream` (trailers, or a reset)."""
        return any(f[2] == stream and (f[0] == RST_STREAM or
                                       (f[0] == HEADERS and f[1] & END_STREAM))
                   for f in self.frames)

    def grant(self, stream, bytes):
        """Opens the flow-control windows of `stream` (0: none) and of the connection by
        `bytes`."""
        increment = struct.pack(">I", bytes)
        self.sock.sendall((frame(WINDOW_UPDATE, 0, stream, increment) if stream else b"") +
                          frame(WINDOW_UPDATE, 0, 0, increment))

    def data(self, stream):
        """The DATA bytes received on `stream`."""
        return b"".join(f[3] for f in self.frames if f[0] == DATA and f[2] == stream)

    def ping(self, seconds=5.0):
        """Sends a PING and reads until its ack; whether it came."""
        payload = struct.pack(">d", random.random())
        self.sock.sendall(frame(PING, 0, 0, payload))
        deadline = time.time() + seconds
        while time.time() < deadline and self.receive(0.05):
            if (PING, 1, 0, payload) in self.frames:
                return True
        return False

    def close(self):
        self.sock.close()


class ServerCase(unittest.TestCase):
    server_args = ()

    @classmethod
    def setUpClass(cls):
        cls.server = RingkvServer(SERVER, "--threads=2", *cls.server_args, *SERVER_FLAGS)
        cls.addClassCleanup(cls.server.stop)
        cls.addr = cls.server.address
        cls.port = int(cls.addr.rsplit(":", 1)[1])

    def cli(self, *args, timeout=10, input=None):
        # A sanitizer's server on two loaded cores once took past 5 s to answer after a flood.
        wait = 20 if SANITIZED else 5
        return subprocess.run([CLI, f"--addr={self.addr}", f"--timeout={wait}", *args],
                              capture_output=True, timeout=max(timeout, wait + 5), input=input)

    def assertServing(self):
        key = f"alive-{random.random()}"
        r = self.cli("put", key, "yes")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.cli("get", key).stdout, b"yes")

    def connect(self):
        return socket.create_connection(("127.0.0.1", self.port), timeout=5)


@unittest.skipUnless("--io=uring" in SERVER_FLAGS, "the --io=uring run's")
class IoUringTest(unittest.TestCase):
    """--io=uring says what it does at start, and falls back to epoll where io_uring is
    refused (the rest of this file's tests run on it in this run)."""

    def serve(self, *args):
        """A server with `args` that answers a PUT and a GET: its start-up log."""
        server = RingkvServer(SERVER, "--threads=2", *args)
        try:
            key = f"io-{random.random()}"
            cli = [CLI, f"--addr={server.address}", "--timeout=5"]
            r = subprocess.run([*cli, "put", key, "yes"], capture_output=True, timeout=10)
            self.assertEqual(r.returncode, 0, r.stderr)
            r = subprocess.run([*cli, "get", key], capture_output=True, timeout=10)
            self.assertEqual(r.stdout, b"yes", r.stderr)
        finally:
            server.stop()
        return "".join(server.startup)

    def test_the_sockets_go_through_io_uring(self):
        self.assertIn("--io=uring: the workers' sockets go through io_uring",
                      self.serve(*SERVER_FLAGS))

    def test_where_io_uring_is_refused_the_sockets_go_on_epoll(self):
        # kernel.io_uring_disabled=2 (Linux 6.6): io_uring_setup fails with EPERM for every
        # process, as under a seccomp profile. Set for the server's start only.
        sysctl = "/proc/sys/kernel/io_uring_disabled"
        if not os.path.exists(sysctl) or not os.access(sysctl, os.W_OK):
            self.skipTest(f"{sysctl} is missing or not writable here")
        with open(sysctl) as f:
            was = f.read().strip()
        with open(sysctl, "w") as f:
            f.write("2")
        try:
            server = RingkvServer(SERVER, "--threads=2", "--io=uring")
        finally:
            with open(sysctl, "w") as f:
                f.write(was)
        startup = "".join(server.startup)
        server.stop()
        self.assertIn("--io=uring: io_uring is unavailable here (io_uring_setup: Operation not "
                      "permitted); the sockets go on epoll", startup)
        self.assertNotIn("go through io_uring", startup)

    def test_a_bad_io_flag_is_a_usage_error(self):
        for args, message in ((["--io=kqueue"], "--io must be epoll or uring, got 'kqueue'"),
                              (["--io=uring", "--transport=grpc"],
                               "--io=uring needs --transport=h2")):
            r = subprocess.run([SERVER, "--listen=127.0.0.1:0", *args], capture_output=True,
                               text=True, timeout=10)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(message, r.stderr)


@unittest.skipIf(GRPCPP, "the h2 transport's flag")
class H2FlagTest(unittest.TestCase):
    def test_a_bad_h2_flag_is_a_usage_error(self):
        for args, message in ((["--h2=h2o"], "--h2 must be ringkv or nghttp2, got 'h2o'"),
                              (["--h2=nghttp2", "--transport=grpc"],
                               "--h2 needs --transport=h2")):
            r = subprocess.run([SERVER, "--listen=127.0.0.1:0", *args], capture_output=True,
                               text=True, timeout=10)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(message, r.stderr)


@unittest.skipIf(GRPCPP, "what the h2 transport answers")
class ProtocolTest(ServerCase):
    def call(self, path="/ringkv.v1.KV/Put", body=grpc_message(put_request(b"k", b"v")), **kw):
        call = Call(self.addr, path, body, **kw)
        self.addCleanup(call.close)
        return call

    def test_a_good_call_gets_headers_message_and_trailers(self):
        call = self.call()
        self.assertEqual(call.wait(), 0)
        self.assertEqual(call.headers[":status"], "200")
        self.assertEqual(call.headers["content-type"], "application/grpc")
        self.assertEqual(call.headers["grpc-accept-encoding"], "identity")
        # One message: a PutResponse holding only its version (field 1, a varint, never 0).
        flags, length = struct.unpack(">BI", call.data[:5])
        self.assertEqual((flags, length), (0, len(call.data) - 5))
        self.assertEqual(call.data[5], 0x08)
        self.assertNotEqual(call.data[6:], b"\x00")

    def test_unknown_method_or_service_is_unimplemented(self):
        for path in ("/ringkv.v1.KV/Nope", "/no.Such/Get", "/"):
            call = self.call(path)
            self.assertEqual(call.wait(), 12, path)
            self.assertIn(path, call.message())
            self.assertNotIn("grpc-status", call.trailers)  # Trailers-only: all in HEADERS.

    def test_not_post_or_not_grpc_gets_an_http_error(self):
        call = self.call(method="GET", body=b"")
        call.wait()
        self.assertEqual(call.headers[":status"], "405")
        call = self.call(content_type="text/plain")
        call.wait()
        self.assertEqual(call.headers[":status"], "415")
        call = self.call(content_type=None)
        call.wait()
        self.assertEqual(call.headers[":status"], "415")
        call = self.call(content_type="application/grpc+json")
        self.assertEqual(call.wait(), 12)
        call = self.call(content_type="application/grpc+proto")
        self.assertEqual(call.wait(), 0)

    def test_compression_is_unimplemented_and_identity_advertised(self):
        call = self.call(body=grpc_message(put_request(b"z", b"v"), compressed=True))
        self.assertEqual(call.wait(), 12)
        self.assertIn("identity", call.message())
        call = self.call(headers=[("grpc-encoding", "gzip")])
        self.assertEqual(call.wait(), 12)
        self.assertEqual(call.headers["grpc-accept-encoding"], "identity")
        self.assertEqual(self.cli("get", "z").returncode, 1)  # Nothing stored.

    def test_a_message_over_the_limit_is_refused_before_it_is_read(self):
        # Only the prefix is sent: the answer must not wait for 100 MiB that never come.
        call = self.call(body=grpc_message(b"", length=100 << 20), end=False)
        self.assertEqual(call.wait(), 8)
        self.assertIn("the limit is", call.message())

    def test_bad_messages_are_internal_errors(self):
        cases = {
            "unparsable": grpc_message(b"\xff\xff\xff\xff"),
            "truncated": grpc_message(b"abc", length=10),
            "two on a unary call": grpc_message(put_request(b"a", b"1")) * 2,
            "none": b"",
        }
        for name, body in cases.items():
            call = self.call(body=body)
            self.assertEqual(call.wait(), 13, name)
        self.assertEqual(self.cli("get", "a").returncode, 1)  # Nothing stored.

    def test_percent_encoded_grpc_message(self):
        call = self.call(body=grpc_message(put_request(b"", b"v")))  # Empty key: refused.
        self.assertEqual(call.wait(), 3)
        self.assertEqual(call.message(), "key is empty; keys are 1 or more bytes")
        call = self.call("/ringkv.v1.KV/caf\u00e9%")
        self.assertEqual(call.wait(), 12)
        self.assertIn("%25", call.message())  # '%' itself is escaped.

    def test_a_passed_deadline_drops_the_work(self):
        call = self.call(body=grpc_message(put_request(b"late", b"v")),
                         headers=[("grpc-timeout", "1n")])
        self.assertEqual(call.wait(), 4)
        self.assertEqual(self.cli("get", "late").returncode, 1)
        call = self.call(headers=[("grpc-timeout", "soon")])
        self.assertEqual(call.wait(), 3)
        # A stream that says nothing: DEADLINE_EXCEEDED when its time is up, not before.
        start = time.time()
        call = self.call("/ringkv.v1.KV/Stream", body=b"", end=False,
                         headers=[("grpc-timeout", "300m")])
        self.assertEqual(call.wait(), 4)
        self.assertGreaterEqual(time.time() - start, 0.29)

    @unittest.skipIf(GRPCPP, "the h2 transport's own buffers")
    def test_a_deadline_while_large_answers_wait_on_a_full_socket(self):
        # A Stream's answers (GETs of 1 MiB, whose values the connection's output shares) wait
        # on a client that does not read: its socket is full, and nghttp2 holds a DATA frame it
        # was promised. The deadline then fails the call, dropping what is not yet framed but
        # keeping that frame's bytes: the client, reading at last, gets whole frames, then
        # DEADLINE_EXCEEDED.
        value = os.urandom(1 << 20)
        r = subprocess.run([CLI, f"--addr={self.addr}", "put", "huge", "-"], input=value,
                           capture_output=True, timeout=10)
        self.assertEqual(r.returncode, 0, r.stderr)
        ops = b"".join(field(1, bytes([0x08, i, 0x10, 1]) + field(3, b"huge"))
                       for i in range(1, 25))  # StreamOp{id: i, type: GET, key: "huge"} x 24.
        call = self.call("/ringkv.v1.KV/Stream", body=grpc_message(ops), end=False,
                         headers=[("grpc-timeout", "1S")], window=1 << 30)
        call.conn.increment_flow_control_window(1 << 30)  # The connection's own window.
        call.flush()
        time.sleep(2)  # Not reading, past the deadline.
        self.assertEqual(call.wait(20), 4, call.message())
        self.assertGreater(len(call.data), 1 << 20)  # Answers came before the deadline.
        self.assertServing()

    def test_oversized_headers_are_refused(self):
        call = self.call(headers=[("x-padding", "p" * 20000)])
        self.assertEqual(call.wait(), 8)
        self.assertIn("16384", call.message())

    def test_a_reset_in_the_middle_of_a_stream(self):
        op = field(3, b"rk") + field(4, b"v") + bytes([0x10, 2]) + bytes([0x08, 1])  # PUT, id 1.
        call = self.call("/ringkv.v1.KV/Stream", body=grpc_message(field(1, op)), end=False)
        call.cancel()
        call.wait(1)
        self.assertServing()

    def tearDown(self):
        self.assertServing()


class HostileBytesTest(ServerCase):
    def expect_goaway_or_close(self, payload):
        with self.connect() as sock:
            try:
                sock.sendall(payload)
            except OSError:
                return []
            return read_frames(sock, 2)

    def test_random_bytes_and_truncated_prefaces(self):
        rng = random.Random(7)
        for size in [1, 23, 24, 100, 4096, 65536] + [rng.randrange(1, 2000) for _ in range(20)]:
            self.expect_goaway_or_close(bytes(rng.randrange(256) for _ in range(size)))
        # A prefix of the preface is a client still sending it: the server waits, so these
        # connections are dropped unread.
        held = []
        for cut in range(1, len(PREFACE)):
            sock = self.connect()
            sock.sendall(PREFACE[:cut])
            held.append(sock)
        self.assertServing()
        for sock in held:
            sock.close()
        self.assertServing()

    def test_bad_frames_get_a_goaway(self):
        settings = frame(SETTINGS, 0, 0)
        bad = {
            "settings of 5 bytes": frame(SETTINGS, 0, 0, b"\0" * 5),
            "frame over the size limit": frame(DATA, 0, 1, b"\0" * 20000),
            "headers on an even stream": frame(HEADERS, END_HEADERS, 2, b"\x82"),
            "garbage hpack": frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\xff" * 20),
            "data on stream 0": frame(DATA, 0, 0, b"x"),
            "ping of 3 bytes": frame(PING, 0, 0, b"abc"),
            "window update of 0": frame(WINDOW_UPDATE, 0, 0, b"\0\0\0\0"),
            "continuation without headers": frame(CONTINUATION, END_HEADERS, 1, b"\x82"),
            "rst_stream on idle stream": frame(RST_STREAM, 0, 9, b"\0\0\0\x08"),
        }
        for name, payload in bad.items():
            frames = self.expect_goaway_or_close(PREFACE + settings + payload)
            if not GRPCPP:
                self.assertIn(GOAWAY, [f[0] for f in frames], name)
        self.assertServing()

    def test_floods_end_the_flooding_connection_only(self):
        settings = frame(SETTINGS, 0, 0)
        floods = [
            frame(PING, 0, 0, b"12345678") * 20000,  # Acks pile up unread.
            frame(SETTINGS, 0, 0) * 20000,
            frame(HEADERS, 0, 1, b"\x82") + frame(CONTINUATION, 0, 1, b"") * 5000,
        ]
        for flood in floods:
            with self.connect() as sock:
                sock.settimeout(3)
                try:
                    sock.sendall(PREFACE + settings + flood)
                except OSError:
                    pass  # The server closed the connection on us: that is the point.
            self.assertServing()


class HandshakeTimeoutTest(ServerCase):
    server_args = ("--handshake-timeout=1",)

    def closed_within(self, sock, seconds):
        """Whether the server closes `sock` within `seconds` (what it sends is read and kept)."""
        sock.settimeout(0.2)
        deadline = time.time() + seconds
        self.received = b""
        while time.time() < deadline:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError:
                return True
            if not chunk:
                return True
            self.received += chunk
        return False

    def test_silent_and_trickling_clients_are_closed_greeted_ones_are_not(self):
        silent = self.connect()
        trickling = self.connect()
        trickling.sendall(PREFACE[:10])
        greeted = self.connect()
        greeted.sendall(PREFACE + frame(SETTINGS, 0, 0))
        try:
            # 1 s to greet; 5 s leaves a slow (sanitized) server room, and a timeout of 0 (the
            # bug this guards against) keeps them open for good.
            self.assertTrue(self.closed_within(silent, 5))
            if not GRPCPP:  # ringkv's own transport says why.
                self.assertIn(b"--handshake-timeout=1s", self.received)
            self.assertTrue(self.closed_within(trickling, 5))
            # The greeted connection has been idle as long and stays open: it answers a PING.
            greeted.sendall(frame(PING, 0, 0, b"12345678"))
            self.assertFalse(self.closed_within(greeted, 1))
            self.assertIn(frame(PING, 1, 0, b"12345678"), self.received)
        finally:
            for sock in (silent, trickling, greeted):
                sock.close()
        self.assertServing()


class IdleTimeoutTest(ServerCase):
    server_args = ("--idle-timeout=1s",)

    def test_an_idle_connection_is_told_and_closed_busy_ones_stay(self):
        idle = RawConnection(self.port)
        calling = RawConnection(self.port)
        holding = RawConnection(self.port)  # A call open and silent, like a Watch stream.
        connections = (idle, calling, holding)
        try:
            held = holding.open_call("/ringkv.v1.KV/Put")
            streams = []
            start, closed_at = time.time(), None
            # 1 s of idleness closes a connection within 1.5 s (the sweep runs every 250 ms);
            # 3.5 s leaves a slow (sanitized) server room, and is idle time enough for the
            # others to be closed too if they counted as idle.
            while time.time() - start < 3.5:
                streams.append(calling.open_call("/ringkv.v1.KV/Get",
                                                 grpc_message(field(1, b"idle-test"))))
                for connection in connections:
                    connection.receive(0.2 / len(connections))
                if idle.closed and closed_at is None:
                    closed_at = time.time() - start
            goaways = idle.goaways()
            if GRPCPP:
                # grpc++'s MAX_CONNECTION_IDLE (Debian's 1.51) closes through its channel idle
                # filter: a GOAWAY that says "enter idle" with INTERNAL_ERROR, not NO_ERROR; the
                # client is left to close. gRPC clients reconnect on their next call either way.
                self.assertGreaterEqual(len(goaways), 1, idle.frames)
                self.assertIn(b"idle", goaways[0][1], goaways)
            else:
                self.assertIsNotNone(closed_at, "the idle connection is still open after 3.5 s")
                self.assertGreaterEqual(closed_at, 0.9)  # Not before the timeout (give or take).
                self.assertEqual(len(goaways), 1, idle.frames)
                self.assertEqual(goaways[0][0], 0)  # NO_ERROR.
                self.assertIn(b"idle for longer than --idle-timeout=1s", goaways[0][1])
            for connection in (calling, holding):
                self.assertFalse(connection.closed, connection.frames)
                self.assertEqual(connection.goaways(), [])
                self.assertTrue(connection.ping())
            self.assertGreaterEqual(len(streams), 10)
            self.assertTrue(all(calling.ended(stream) for stream in streams[:-1]))
            self.assertFalse(holding.ended(held))
        finally:
            for connection in connections:
                connection.close()
        self.assertServing()

    def test_a_call_the_client_resets_after_another_call_ends_goes(self):
        # The reset call's stream is not the last one the connection heard of: its end must
        # still reach it (the call goes, and its connection becomes idle and is closed).
        connection = RawConnection(self.port)
        try:
            held = connection.open_call("/ringkv.v1.KV/Put")  # Open, silent.
            unary = connection.open_call("/ringkv.v1.KV/Get", grpc_message(field(1, b"k")))
            while connection.receive(0.1) and not connection.ended(unary):
                pass
            connection.sock.sendall(frame(RST_STREAM, 0, held, b"\0\0\0\x08"))  # CANCEL
            deadline = time.time() + 3.5
            while time.time() < deadline and connection.receive(0.1) and \
                    not connection.goaways():
                pass
            goaways = connection.goaways()
            self.assertTrue(goaways, "a reset call still holds its connection busy")
            # grpc++ says "enter idle" (see the test above).
            self.assertIn(b"enter idle" if GRPCPP else b"idle for longer than --idle-timeout=1s",
                          goaways[0][1])
        finally:
            connection.close()
        self.assertServing()


@unittest.skipIf(GRPCPP, "the h2 transport's bound (grpc++ refuses --send-timeout)")
class SendTimeoutTest(ServerCase):
    server_args = ("--send-timeout=1s",)

    def test_a_client_that_takes_no_answer_is_told_and_closed_slow_ones_stay(self):
        # Five clients. One keeps its window shut on a GET of 512 KiB while it reads its socket
        # and PINGs every 20 ms: the sweep (every 250 ms) mostly runs with a PING's ack in the
        # output, and acks are not its answer moving. One reads nothing on four GETs of 4 MiB,
        # far past what the kernel's socket buffers take: TCP's window holds them back. One
        # has a call open and floods PINGs without reading their acks: no answer of DATA, but
        # its output is stuck. One opens its window 8 KiB at a time on a GET of 512 KiB (slow,
        # but its answer moves), and one has a call open that has nothing to answer yet (like a
        # Watch stream). Only the first three are closed, after 1 s, and the reply memory their
        # answers held is back.
        value, huge = os.urandom(512 << 10), os.urandom(4 << 20)
        for key, data in ((b"slow-big", value), (b"slow-huge", huge)):
            r = self.cli("put", key, "-", input=data)
            self.assertEqual(r.returncode, 0, r.stderr)
        shut = RawConnection(self.port, window=0)
        full = RawConnection(self.port, window=(1 << 31) - 1, rcvbuf=4096)
        acks = RawConnection(self.port, rcvbuf=4096)
        slow = RawConnection(self.port, window=0)
        quiet = RawConnection(self.port)
        connections = (shut, full, acks, slow, quiet)
        try:
            acks.open_call("/ringkv.v1.KV/Put")
            self.flood_unread(acks.sock, frame(PING, 0, 0, b"a" * 8) * 4096)
            full.grant(0, 1 << 30)
            get = grpc_message(field(1, b"slow-big"))
            streams = {c: c.open_call("/ringkv.v1.KV/Get", get) for c in (shut, slow)}
            full_streams = [full.open_call("/ringkv.v1.KV/Get",
                                           grpc_message(field(1, b"slow-huge")))
                            for _ in range(4)]
            held = quiet.open_call("/ringkv.v1.KV/Put")
            start, closed_at, tick = time.time(), None, 0
            while time.time() - start < 3.5:
                tick += 1
                if tick % 10 == 0:
                    slow.grant(streams[slow], 8 << 10)
                if not shut.closed:
                    try:
                        shut.sock.sendall(frame(PING, 0, 0, b"p" * 8))
                    except OSError:  # Closed since it last read.
                        pass
                for connection in (shut, slow, quiet):
                    connection.receive(0.005)
                if shut.closed and closed_at is None:
                    closed_at = time.time() - start
                time.sleep(max(0.0, start + tick * 0.02 - time.time()))
            self.assertIsNotNone(closed_at, "the client that keeps its window shut is open")
            self.assertGreaterEqual(closed_at, 0.9)  # Not before the timeout (give or take).
            self.assertGreater(sum(f[0] == PING and f[1] & 1 for f in shut.frames), 20)
            goaways = shut.goaways()
            self.assertEqual(len(goaways), 1, shut.frames)
            self.assertEqual(goaways[0][0], 0)  # NO_ERROR.
            self.assertIn(b"answers unread for longer than --send-timeout=1s", goaways[0][1])
            self.assertEqual(shut.data(streams[shut]), b"")
            # What reached the non-reader's socket buffers before they filled, then the close
            # (its GOAWAY finds no room; a protocol error's would have).
            deadline = time.time() + 10
            while full.receive(0.5) and time.time() < deadline:
                pass
            self.assertTrue(full.closed)
            self.assertEqual([g for g in full.goaways() if g[0] != 0], [])
            self.assertTrue(self.drained_to_close(acks.sock, 10), "the PING flooder is open")
            for connection in (slow, quiet):
                self.assertFalse(connection.closed, connection.frames)
                self.assertEqual(connection.goaways(), [])
            got = slow.data(streams[slow])
            self.assertGreater(len(got), 64 << 10)  # It moved all along ...
            self.assertIn(value[:4096], got)  # ... and is still not all there.
            self.assertLess(len(got), len(value))
            self.assertFalse(quiet.ended(held))
            # Only the slow client's answer holds reply memory now (it goes on moving).
            deadline = time.time() + 10
            while b"answers: 0.5 MiB of values held" not in self.cli("stats").stdout:
                self.assertLess(time.time(), deadline, self.cli("stats").stdout)
                slow.grant(streams[slow], 1024)
                slow.receive(0.1)
            self.assertFalse(slow.closed)
        finally:
            for connection in connections:
                connection.close()
        self.assertServing()

    @staticmethod
    def flood_unread(sock, burst, seconds=5):
        """Sends `burst` again and again without reading, until the socket has taken nothing
        for 0.3 s (the server stopped reading), the server closed it, or `seconds` pass."""
        sock.setblocking(False)
        pending, stuck_since, deadline = burst, None, time.time() + seconds
        while time.time() < deadline:
            try:
                sent = sock.send(pending)
            except BlockingIOError:
                sent = 0
            except OSError:  # Closed on it: nghttp2 ends a session whose acks pile up.
                break
            pending = pending[sent:] or burst
            if sent:
                stuck_since = None
            elif stuck_since is None:
                stuck_since = time.time()
            elif time.time() - stuck_since >= 0.3:
                break
            else:
                time.sleep(0.01)
        sock.setblocking(True)

    @staticmethod
    def drained_to_close(sock, seconds):
        """Reads and drops what `sock` holds; whether the server closed it within `seconds`."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            sock.settimeout(max(0.001, deadline - time.time()))
            try:
                if not sock.recv(1 << 20):
                    return True
            except socket.timeout:
                return False
            except ConnectionResetError:
                return True
        return False


class ResourceTest(ServerCase):
    """Each test starts a server of its own (the limits differ)."""

    @classmethod
    def setUpClass(cls):
        pass

    def start(self, *args, nofile=None):
        def limit():
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        server = RingkvServer(SERVER, "--threads=2", *args, *SERVER_FLAGS, preexec_fn=limit)
        self.addCleanup(server.stop)
        self.addr = server.address
        self.port = int(self.addr.rsplit(":", 1)[1])
        return server

    @unittest.skipIf(GRPCPP, "the h2 transport's own buffers")
    def test_large_answers_held_back_while_their_keys_change_carry_what_was_read(self):
        # With one worker, a GET of a large value shares it where it lies in the shard's record
        # until the socket has taken it (Table::Lend; not under --io=uring, which copies). Here
        # the answers wait on a window of 0 while their keys are overwritten in place, deleted
        # and their memory reused; once the client opens its window, each answer is the value
        # its GET read, whole. A MultiGet's items are lent the same way, inside its reply: one
        # record twice, between a small value and a missing key.
        self.start("--threads=1")
        old = {b"lent-arena": os.urandom(300_000), b"lent-mapped": os.urandom(900_000),
               b"small": b"s" * 100}
        for key, value in old.items():
            r = self.cli("put", key, "-", input=value)
            self.assertEqual(r.returncode, 0, r.stderr)
        calls = {key: self.call_held(key) for key in old if key != b"small"}
        batch = [b"lent-arena", b"small", b"lent-mapped", b"missing", b"lent-arena"]
        calls[b"multi"] = Call(self.addr, "/ringkv.v1.KV/MultiGet",
                               grpc_message(b"".join(field(1, key) for key in batch)), window=0)
        self.addCleanup(calls[b"multi"].close)
        for call in calls.values():
            call.wait(1)  # The answer's headers: the GET has run.
            self.assertEqual(call.headers.get(":status"), "200")
            self.assertEqual(call.data, b"")
        new = os.urandom(300_000)
        self.assertEqual(self.cli("put", "lent-arena", "-", input=new).returncode, 0)
        self.assertEqual(self.cli("del", "lent-mapped").returncode, 0)
        for i in range(4):  # Into the freed memory, where the allocator reuses it.
            self.assertEqual(self.cli("put", f"other-{i}", "-", input=b"o" * 900_000).returncode, 0)
        for key, call in calls.items():
            call.conn.increment_flow_control_window(1 << 24, call.stream)
            call.conn.increment_flow_control_window(1 << 24)
            call.flush()
            self.assertEqual(call.wait(10), 0, call.message())
            if key == b"multi":
                self.assertEqual(multi_get_values(call.data),
                                 [old.get(k, 5) for k in batch])  # 5: NOT_FOUND.
            else:
                self.assertEqual(get_value(call.data), old[key], key)
        self.assertEqual(self.cli("get", "lent-arena").stdout, new)
        self.assertNotEqual(self.cli("get", "lent-mapped").returncode, 0)
        self.assertServing()

    def test_large_puts_read_back_whole_whatever_follows(self):
        # A unary PUT of 16 KiB or more comes in pieces: read into its call's buffer, parsed in
        # place, its value copied into the table from there (Handler::ParseInPlace). Whatever
        # follows, each key reads back what was last written to it: overwrites by large and
        # small values, a TTL, deletes, keys on either worker, a value field before the key and
        # a condition after both, an answer held while its key changes, and a restart from the
        # data directory.
        data = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, data, True)
        server = self.start(f"--data-dir={data}")
        rng = random.Random(25)
        want = {}

        def put(key, value, *flags):
            r = self.cli("put", *flags, key, "-", input=value)
            self.assertEqual(r.returncode, 0, r.stderr)
            want[key] = value

        for i in range(24):
            put(f"big-{i}", os.urandom(rng.randrange(16 << 10, 300 << 10)))
        read = want["big-0"]
        held = self.call_held(b"big-0")
        held.wait(1)
        self.assertEqual(held.headers.get(":status"), "200")
        for i in range(0, 24, 3):
            put(f"big-{i}", os.urandom(rng.randrange(16 << 10, 300 << 10)))
        for i in range(1, 24, 6):
            put(f"big-{i}", b"small now")
        for i in range(2, 24, 6):
            put(f"big-{i}", os.urandom(40 << 10), "--ttl=1h")
        for i in range(5, 24, 6):
            self.assertEqual(self.cli("del", f"big-{i}").returncode, 0)
            del want[f"big-{i}"]
        # A raw call whose value comes before the key, and a condition after both.
        value = os.urandom(40 << 10)  # Within HTTP/2's first window, which Call does not wait on.
        call = Call(self.addr, "/ringkv.v1.KV/Put",
                    grpc_message(field(2, value) + field(1, b"raw") + field(4, b"\x08\x01")))
        self.addCleanup(call.close)
        self.assertEqual(call.wait(10), 0, call.message())
        want["raw"] = value
        held.conn.increment_flow_control_window(1 << 24, held.stream)
        held.conn.increment_flow_control_window(1 << 24)
        held.flush()
        self.assertEqual(held.wait(10), 0, held.message())
        self.assertEqual(get_value(held.data), read)  # What it read, not what replaced it.

        def check():
            for i in range(24):
                r = self.cli("get", f"big-{i}")
                if f"big-{i}" in want:
                    self.assertEqual(r.returncode, 0, (i, r.stderr))
                    self.assertEqual(r.stdout, want[f"big-{i}"], i)
                else:
                    self.assertEqual(r.returncode, 1, (i, r.stderr))
            self.assertEqual(self.cli("get", "raw").stdout, want["raw"])
            ttl = self.cli("ttl", "big-2")
            self.assertEqual(ttl.returncode, 0, ttl.stderr)
            self.assertNotIn(b"no TTL", ttl.stdout)

        check()
        server.stop()
        self.start(f"--data-dir={data}")
        check()
        self.assertServing()

    @unittest.skipIf(GRPCPP or "--io=uring" in SERVER_FLAGS,
                     "where values are lent: elsewhere the reply's values are copied first")
    def test_a_reply_past_protobufs_limit_is_refused_whole(self):
        # One key many times over costs a reply of lent values next to no memory, but a reply
        # of 2 GiB or more is no protobuf message (and past 4 GiB its gRPC prefix would wrap):
        # refused, saying why.
        self.start("--threads=1", f"--max-value-bytes={64 << 20}", "--max-reply-bytes=4GiB")
        r = self.cli("put", "huge", "-", input=b"h" * (64 << 20), timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        call = Call(self.addr, "/ringkv.v1.KV/MultiGet", grpc_message(field(1, b"huge") * 33))
        self.addCleanup(call.close)
        self.assertEqual(call.wait(10), 8, call.message())  # RESOURCE_EXHAUSTED
        self.assertIn("a gRPC message is at most 2147483647", call.message())
        self.assertServing()

    def test_batches_past_their_limits_are_refused_whole_and_cost_nothing(self):
        # One call can ask for much: a MultiGet of one key many times over asks for its value
        # as often (here 10,000 x 4 MiB, 40 GiB). --max-batch-items (10,000) bounds a MultiGet's
        # keys, a MultiPut's items and a Stream message's operations; --max-reply-bytes (64 MiB)
        # the values a MultiGet's reply carries, and its shards stop copying them once it is
        # passed. Four keys: both workers' shards, values lent on one and copied on the other.
        server = self.start()
        # A batch that its handler's own parser leaves to protobuf (here for an unknown field,
        # 15) is counted before it is parsed: past --max-batch-items, it is refused with
        # nothing parsed. Protobuf would make a string of each 3-byte key: about 13 times the
        # message's 8 MiB.
        before = rss_kib(server.process.pid)
        many = (8 << 20) // 3
        call = Call(self.addr, "/ringkv.v1.KV/MultiGet",
                    grpc_message(field(1, b"0") * many + bytes([15 << 3, 1])))
        self.addCleanup(call.close)
        self.assertEqual(call.wait(30), 3, call.message())  # INVALID_ARGUMENT
        self.assertIn(f"MultiGet has {many} keys; the limit is --max-batch-items=10000",
                      call.message())
        grown = rss_kib(server.process.pid, "VmHWM") - before
        print(f"8 MiB of keys refused; resident memory grew by {grown} KiB", file=sys.stderr)
        if not SANITIZED:  # The message and a copy, where protobuf would take about 110 MiB.
            self.assertLess(grown, 48 << 10, f"RSS grew by {grown} KiB")
        # Protobuf keeps every unknown field it parses, an object each: a GET, or a large PUT
        # (whose value its handler keeps in place), of 8 MiB of empty unknown fields (field 15)
        # is counted first and refused, where protobuf would make over 200 MiB of them. grpc++
        # answers any message it cannot take INTERNAL.
        unknown = bytes([15 << 3 | 2, 0]) * (4 << 20)
        for method, fields in (("Get", field(1, b"k")),
                               ("Put", field(1, b"k") + field(2, b"v" * (20 << 10)))):
            before = rss_kib(server.process.pid)
            call = Call(self.addr, f"/ringkv.v1.KV/{method}", grpc_message(fields + unknown))
            self.addCleanup(call.close)
            if GRPCPP:
                self.assertEqual(call.wait(30), 13, call.message())  # INTERNAL
            else:
                self.assertEqual(call.wait(30), 3, call.message())  # INVALID_ARGUMENT
                self.assertIn("the request message holds more than 161024 fields",
                              call.message())
            grown = rss_kib(server.process.pid, "VmHWM") - before
            print(f"{method} of 8 MiB of unknown fields refused; resident memory grew by "
                  f"{grown} KiB", file=sys.stderr)
            if not SANITIZED:
                self.assertLess(grown, 48 << 10, f"RSS grew by {grown} KiB")
        big = {str(i).encode(): bytes([i]) * (4 << 20) for i in range(4)}
        for key, value in big.items():
            r = self.cli("put", key, "-", input=value, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
        before = rss_kib(server.process.pid)
        started = time.time()
        keys = b"".join(field(1, key) for key in big)
        call = Call(self.addr, "/ringkv.v1.KV/MultiGet", grpc_message(keys * 2500))
        self.addCleanup(call.close)
        self.assertEqual(call.wait(30), 8, call.message())  # RESOURCE_EXHAUSTED
        self.assertIn("the limit is --max-reply-bytes=67108864", call.message())
        grown = rss_kib(server.process.pid, "VmHWM") - before  # The peak: copies freed count.
        print(f"refused in {time.time() - started:.2f} s; resident memory grew by {grown} KiB",
              file=sys.stderr)
        if not SANITIZED:  # The budget's 64 MiB copied at most, and the message's keys.
            self.assertLess(grown, 256 << 10, f"RSS grew by {grown} KiB")
        # One key past --max-batch-items: refused whole, before any is read.
        call = Call(self.addr, "/ringkv.v1.KV/MultiGet", grpc_message(field(1, b"0") * 10_001))
        self.addCleanup(call.close)
        self.assertEqual(call.wait(10), 3, call.message())  # INVALID_ARGUMENT
        self.assertIn("MultiGet has 10001 keys; the limit is --max-batch-items=10000",
                      call.message())
        # Within the limits, a batch is answered.
        call = Call(self.addr, "/ringkv.v1.KV/MultiGet", grpc_message(keys))
        self.addCleanup(call.close)
        self.assertEqual(call.wait(30), 0, call.message())
        self.assertEqual(multi_get_values(call.data), list(big.values()))
        self.assertServing()

    def test_a_stream_that_does_not_read_holds_about_max_reply_bytes(self):
        # A Stream's GETs hold their values until the client reads the answers: a client that
        # asks for large values and does not read would have the server hold every one (up to
        # 4,096 in flight, 100 calls a connection). Past --max-reply-bytes unread, a GET is
        # answered RESOURCE_EXHAUSTED with nothing read, and the call stops reading messages
        # until the client reads; then it goes on as before.
        self.start("--max-reply-bytes=8MiB")
        value = os.urandom(1 << 20)
        r = self.cli("put", "s", "-", input=value)
        self.assertEqual(r.returncode, 0, r.stderr)
        call = Call(self.addr, "/ringkv.v1.KV/Stream", grpc_message(stream_gets(b"s", range(1, 21))),
                    end=False, window=0)
        self.addCleanup(call.close)
        self.assertIsNone(call.wait(1))  # Answered, but nothing can be sent yet.
        # The client reads; once it has the answers, the budget is back: one more GET.
        call.conn.increment_flow_control_window(1 << 30, call.stream)
        call.conn.increment_flow_control_window(1 << 30)
        call.flush()
        deadline = time.time() + 20
        while len(stream_results(call.data)) < 20 and time.time() < deadline:
            call.wait(0.2)
        call.send(grpc_message(stream_gets(b"s", [21])), end=True)
        self.assertEqual(call.wait(20), 0, call.message())
        results = stream_results(call.data)
        self.assertEqual(sorted(results), list(range(1, 22)))
        first = [results[i] for i in range(1, 21)]
        self.assertEqual(sum(1 for code, got in first if code == 0 and got == value), 8, first)
        refused = [got for code, got in first if code == 8]  # RESOURCE_EXHAUSTED
        self.assertEqual(len(refused), 12, first)
        self.assertIn(b"would pass --max-reply-bytes=8388608", refused[0])
        self.assertEqual(results[21], (0, value))
        self.assertServing()

    def test_answers_that_clients_do_not_read_hold_at_most_max_reply_memory(self):
        # Every call's answers together hold at most --max-reply-memory of values until they
        # have left their calls: 100 calls a connection, each a GET of a large value or a
        # MultiGet of --max-reply-bytes, would otherwise hold them all for a client that does
        # not read, on as many connections as it opens. Here 8 GETs of 1 MiB on 8 connections
        # that never read spend it; then a GET, a MultiGet and a Stream GET of a large value
        # are refused RESOURCE_EXHAUSTED naming the flag, nothing read, while small values are
        # served. Once those clients go, what they held is back.
        self.start(f"--max-value-bytes={1 << 20}", "--max-reply-bytes=4MiB", "--max-reply-memory=8MiB")
        value = os.urandom(1 << 20)
        r = self.cli("put", "big", "-", input=value)
        self.assertEqual(r.returncode, 0, r.stderr)

        def answers_hold(mib):
            said = f"answers: {mib:.1f} MiB of values held until sent".encode()
            deadline = time.time() + 20
            while time.time() < deadline:
                r = self.cli("stats")
                self.assertEqual(r.returncode, 0, r.stderr)
                if said in r.stdout:
                    return
                time.sleep(0.1)
            self.fail(f"stats never said {said}: {r.stdout}")

        held = [self.call_held(b"big") for _ in range(8)]
        answers_hold(8)
        for args in (["get", "big"], ["mget", "small-missing", "big"]):
            r = self.cli(*args)
            self.assertEqual(r.returncode, 3, (args, r.stderr))  # RESOURCE_EXHAUSTED
            self.assertIn(b"would pass --max-reply-memory=8388608", r.stderr)
        call = Call(self.addr, "/ringkv.v1.KV/Stream", grpc_message(stream_gets(b"big", [1])))
        self.addCleanup(call.close)
        self.assertEqual(call.wait(20), 0, call.message())
        code, said = stream_results(call.data)[1]
        self.assertEqual(code, 8, said)
        self.assertIn(b"would pass --max-reply-memory=8388608", said)
        self.assertServing()  # Small values.
        answers_hold(8)  # The refused took nothing.
        for c in held:
            c.close()
        answers_hold(0)
        r = self.cli("mget", "big", "big", "big", "big")  # --max-reply-bytes of values.
        self.assertEqual(r.returncode, 0, r.stderr)
        call = Call(self.addr, "/ringkv.v1.KV/Stream",
                    grpc_message(stream_gets(b"big", range(1, 5))))
        self.addCleanup(call.close)
        self.assertEqual(call.wait(20), 0, call.message())
        self.assertEqual(stream_results(call.data), {i: (0, value) for i in range(1, 5)})
        answers_hold(0)  # Given back as each was sent.

    def test_a_stream_message_past_the_limit_while_an_answer_is_being_written(self):
        # The call ends while the transport still holds an answer of its: it finishes once that
        # Write is done, the answer whole before the status; or, if the client resets the
        # call meanwhile, at once (and the server still stops in time).
        server = self.start("--max-batch-items=2")
        value = os.urandom(1 << 20)
        r = self.cli("put", "s", "-", input=value)
        self.assertEqual(r.returncode, 0, r.stderr)
        for reset in (False, True):
            call = Call(self.addr, "/ringkv.v1.KV/Stream",
                        grpc_message(stream_gets(b"s", [1, 2])), end=False, window=0)
            self.addCleanup(call.close)
            deadline = time.time() + 20
            while ":status" not in call.headers and time.time() < deadline:
                call.wait(0.1)  # The answer's headers go with its first Write.
            self.assertIn(":status", call.headers)
            call.send(grpc_message(stream_gets(b"s", [3, 4, 5])), end=True)
            time.sleep(0.5)  # Read and refused; the call's end waits on the Write out.
            if reset:
                call.cancel()
                self.assertServing()
                continue
            call.conn.increment_flow_control_window(1 << 30, call.stream)
            call.conn.increment_flow_control_window(1 << 30)
            call.flush()
            self.assertEqual(call.wait(20), 3, call.message())  # INVALID_ARGUMENT
            self.assertIn("a Stream message has 3 operations", call.message())
            # GET 1's answer, whole, and GET 2's if the window opened before the refusal.
            results = stream_results(call.data)
            self.assertIn(1, results)
            self.assertTrue(set(results) <= {1, 2}, results.keys())
            self.assertTrue(all(got == (0, value) for got in results.values()))
        self.assertServing()
        server.stop()  # Fails if a call that never finished holds the server past STOP_S.

    def test_batch_limits_are_flags_and_checked_at_start(self):
        self.start("--max-batch-items=2", "--max-reply-bytes=5MiB")
        r = self.cli("put", "v4", "-", input=b"x" * (4 << 20))
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.cli("mget", "v4", "v4")
        self.assertEqual(r.returncode, 3, r.stderr)  # RESOURCE_EXHAUSTED: 8 MiB of values.
        self.assertIn(b"--max-reply-bytes=5242880", r.stderr)
        r = self.cli("mget", "v4", "missing")
        self.assertEqual(r.returncode, 1, r.stderr)  # Answered: one key not found.
        self.assertEqual(r.stdout.count(b"\n"), 2)
        # One item past --max-batch-items: each method refused whole, nothing run.
        refusals = {
            "MultiGet": (field(1, b"v4") * 3, "MultiGet has 3 keys"),
            "MultiPut": (b"".join(field(1, put_request(f"mp-{i}".encode(), b"v"))
                                  for i in range(3)), "MultiPut has 3 items"),
            "Stream": (b"".join(field(1, bytes([2 << 3, 2]) + field(3, f"st-{i}".encode()) +
                                      field(4, b"v")) for i in range(3)),
                       "a Stream message has 3 operations"),
        }
        # The same with an unknown field (15), which the handlers' own parsers leave to
        # protobuf: refused on their count, unparsed.
        for method, (body, said) in list(refusals.items()):
            refusals[method + " with an unknown field"] = (body + bytes([15 << 3, 1]), said)
        for name, (body, said) in refusals.items():
            method = name.split()[0]
            call = Call(self.addr, f"/ringkv.v1.KV/{method}", grpc_message(body))
            self.addCleanup(call.close)
            self.assertEqual(call.wait(10), 3, (name, call.message()))  # INVALID_ARGUMENT
            self.assertIn(f"{said}; the limit is --max-batch-items=2", call.message())
        # A Stream message of more fields than 16 for each of --max-batch-items and 1024
        # (here 3,000 unknown ones) ends the call with the refusal, on grpc++ too.
        call = Call(self.addr, "/ringkv.v1.KV/Stream",
                    grpc_message(field(1, bytes([2 << 3, 2]) + field(3, b"st-f") + field(4, b"v")) +
                                 bytes([15 << 3 | 2, 0]) * 3000))
        self.addCleanup(call.close)
        self.assertEqual(call.wait(10), 3, call.message())  # INVALID_ARGUMENT
        self.assertIn("the request message holds more than 1056 fields", call.message())
        for key in ("mp-0", "mp-2", "st-0", "st-2", "st-f"):
            self.assertEqual(self.cli("get", key).returncode, 1, key)  # Not found.
        for flags, said in ((["--max-batch-items=0"], "--max-batch-items must be 1 .. 1000000"),
                            (["--max-reply-bytes=1MiB"], "at least --max-value-bytes (4194304)"),
                            (["--max-reply-bytes=lots"], "--max-reply-bytes must be bytes"),
                            (["--max-reply-memory=32MiB"],
                             "at least --max-reply-bytes (67108864)"),
                            (["--max-reply-memory=lots"], "--max-reply-memory must be bytes")):
            r = subprocess.run([SERVER, "--listen=127.0.0.1:0", *flags, *SERVER_FLAGS],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(said, r.stderr)
        self.assertServing()

    def call_held(self, key):
        call = Call(self.addr, "/ringkv.v1.KV/Get", grpc_message(field(1, key)), window=0)
        self.addCleanup(call.close)
        return call

    @unittest.skipIf(GRPCPP, "the h2 transport's bound")
    def test_clients_that_never_read_leave_memory_bounded(self):
        import hpack
        server = self.start()
        value = b"v" * (64 << 10)
        r = subprocess.run([CLI, f"--addr={self.addr}", "put", "big", "-"], input=value,
                           capture_output=True, timeout=10)
        self.assertEqual(r.returncode, 0, r.stderr)
        before = rss_kib(server.process.pid)
        get = grpc_message(field(1, b"big"))
        block = hpack.Encoder().encode([(":method", "POST"), (":scheme", "http"),
                                        (":path", "/ringkv.v1.KV/Get"), (":authority", "x"),
                                        ("content-type", "application/grpc")])
        unknown = hpack.Encoder().encode([(":method", "POST"), (":scheme", "http"),
                                          (":path", "/ringkv.v1.KV/Nope"), (":authority", "x"),
                                          ("content-type", "application/grpc")])
        sockets = []
        for _ in range(4):
            sock = self.connect()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            # A window of 0: the server may send no DATA at all.
            out = PREFACE + frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 0))
            stream = 1
            for _ in range(100):  # Every stream the server allows: GETs of 64 KiB.
                out += frame(HEADERS, END_HEADERS, stream, block) + \
                    frame(DATA, END_STREAM, stream, get)
                stream += 2
            sock.sendall(out)
            # Then calls that fail at once (not flow-controlled answers), as fast as the
            # server takes them, for at most 2 s or 200,000 calls.
            sock.setblocking(False)
            deadline = time.time() + 2
            sent = 0
            while time.time() < deadline and sent < 200_000:
                burst = b"".join(frame(HEADERS, END_HEADERS | END_STREAM, stream + 2 * i,
                                       unknown) for i in range(500))
                try:
                    sock.send(burst)  # A partial send only spoils this connection's framing.
                except BlockingIOError:
                    break
                stream += 1000
                sent += 500
            sockets.append(sock)
        self.assertServing()
        grown = rss_kib(server.process.pid) - before
        print(f"resident memory grew by {grown} KiB", file=sys.stderr)
        # 4 x 100 responses of 64 KiB wait for a window that never opens (25 MiB), and the
        # socket backlog of each connection stops its reading: the rest is bounded.
        if not SANITIZED:
            self.assertLess(grown, 96 << 10, f"RSS grew by {grown} KiB")
        for sock in sockets:
            sock.close()
        self.assertServing()

    @unittest.skipIf(GRPCPP, "grpc++ stops accepting for good (documented)")
    def test_out_of_descriptors_refuses_promptly_and_recovers(self):
        server = self.start(nofile=64)
        held = []
        refused = reset = 0
        try:
            for _ in range(80):
                sock = self.connect()
                sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
                held.append(sock)
            for sock in held:
                sock.settimeout(0.05)
                try:
                    data = sock.recv(4096)
                except socket.timeout:
                    continue
                except ConnectionResetError:
                    reset += 1  # Said below; a server that died fails here with its log.
                    continue
                if b"out of file descriptors" in data:
                    refused += 1
        finally:
            for sock in held:
                sock.close()
        if server.process.poll() is not None:
            server.stop()  # Fails with the end of its log.
        print(f"{refused} refused with a reason, {reset} reset", file=sys.stderr)
        self.assertGreater(refused, 0, "no connection was told the server is out of descriptors")
        time.sleep(0.3)
        self.assertServing()

    @unittest.skipIf(GRPCPP, "h2 only: grpc++ has no bound")
    def test_max_connections_refuses_the_next_one_with_a_reason(self):
        self.start("--max-connections=10")
        held = [self.connect() for _ in range(10)]
        for sock in held:
            sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
        time.sleep(0.2)
        with self.connect() as extra:
            frames = read_frames(extra, 2)
            goaways = [f for f in frames if f[0] == GOAWAY]
            self.assertTrue(goaways, frames)
            self.assertIn(b"--max-connections=10", goaways[0][3])
        for sock in held:
            sock.close()
        time.sleep(0.2)
        self.assertServing()

    @unittest.skipIf(GRPCPP, "h2 only: grpc++ has no bound")
    def test_max_connections_makes_the_idlest_idle_connection_go(self):
        self.start("--max-connections=8")
        held = [RawConnection(self.port) for _ in range(8)]
        try:
            # Idle for 1 s makes a connection evictable; the sweep notices within 2 s.
            time.sleep(2.5)
            # Half of them speak now: they are no longer idle and must stay.
            for connection in held[4:]:
                self.assertTrue(connection.ping())
            # Two new clients (the CLI's put, then its get): the put makes one go, the get
            # another unless the put's connection had closed by then.
            self.assertServing()
            for connection in held:
                connection.receive(0.1)
            gone = [i for i, connection in enumerate(held) if connection.closed]
            self.assertIn(len(gone), (1, 2), gone)
            self.assertTrue(all(i < 4 for i in gone), gone)
            for i in gone:
                goaways = held[i].goaways()
                self.assertEqual(len(goaways), 1)
                self.assertEqual(goaways[0][0], 0)  # NO_ERROR.
                self.assertIn(b"to make room for a new connection", goaways[0][1])
                self.assertIn(b"--max-connections=8", goaways[0][1])
        finally:
            for connection in held:
                connection.close()

    @unittest.skipIf(GRPCPP, "h2 only: grpc++ has no bound")
    def test_max_connections_refuses_when_every_connection_has_a_call_open(self):
        self.start("--max-connections=8")
        held = [RawConnection(self.port) for _ in range(8)]
        try:
            for connection in held:
                connection.open_call("/ringkv.v1.KV/Put")  # Open, waiting for its message.
            time.sleep(2.5)  # As long as the idle ones above: these are busy all along.
            with self.connect() as extra:
                goaways = [f for f in read_frames(extra, 2) if f[0] == GOAWAY]
                self.assertTrue(goaways)
                self.assertIn(b"--max-connections=8", goaways[0][3])
            for connection in held:
                self.assertTrue(connection.ping())
        finally:
            for connection in held:
                connection.close()
        time.sleep(0.2)
        self.assertServing()

    @unittest.skipIf(GRPCPP and SANITIZED, "grpc++ under a sanitizer: every connection costs "
                     "it suppressed race reports inside gRPC's uninstrumented code")
    def test_ten_thousand_open_connections(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard < 10_200:
            self.skipTest(f"the open-files hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        args = () if GRPCPP else ("--max-connections=10100",)
        server = self.start(*args)
        held = []
        try:
            for _ in range(10_000):
                sock = socket.socket()
                sock.setblocking(False)
                try:
                    sock.connect(("127.0.0.1", self.port))
                except BlockingIOError:
                    pass
                held.append(sock)
            time.sleep(0.5)
            for sock in held:
                try:
                    sock.send(PREFACE + frame(SETTINGS, 0, 0))
                except OSError:
                    pass
            time.sleep(1)
            self.assertServing()
            rss = rss_kib(server.process.pid)
            print(f"resident memory with 10,000 connections: {rss} KiB", file=sys.stderr)
            if not SANITIZED:
                self.assertLess(rss, 1 << 20, f"RSS {rss} KiB with 10,000 connections")
        finally:
            for sock in held:
                sock.close()
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        time.sleep(0.3)
        self.assertServing()


if __name__ == "__main__":
    venv_main.run(TOOLS)
