#!/usr/bin/env python3
"""HTTP/2 conformance by h2spec (an independent suite of RFC 9113 and RFC 7541 tests):

- ringkv's HTTP/2 session alone (build/server/h2-session-echo, which answers every request that
  ends) passes every test, the strict ones included, but one that assumes the default frame size
  (LARGER_FRAMES);
- ringkv-server on it fails only tests that need a stream left open after a request the server
  has already answered: h2spec's requests are not gRPC, so the server answers each at once (405
  or 415, trailers-only) and closes the stream, and what h2spec sends on it next lands on a
  stream that is closed, not open or half-closed as the test meant.

Usage: h2_conformance_test.py H2SPEC ECHO SERVER [SERVER_FLAGS...]
"""
import os
import re
import socket
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "testing"))
from ringkv_server import RingkvServer  # noqa: E402

H2SPEC, ECHO, SERVER = sys.argv[1:4]
SERVER_FLAGS = sys.argv[4:]

# Each needs a stream that stays open (or half-closed) after its request; see above.
ANSWERED_ALREADY = {
    "generic/2/2",      # WINDOW_UPDATE on a half-closed (remote) stream
    "generic/2/3",      # PRIORITY on a half-closed (remote) stream
    "http2/5.1/8",      # DATA after the client's RST_STREAM
    "http2/5.1/9",      # HEADERS after the client's RST_STREAM
    "http2/5.1.2/1",    # streams past SETTINGS_MAX_CONCURRENT_STREAMS (those answered free slots)
    "http2/6.9/2",      # WINDOW_UPDATE of 0 on a stream
    "http2/6.9.1/3",    # a stream's window past 2^31 - 1
    "http2/8.1/1",      # a second HEADERS without END_STREAM
    "http2/8.1.2.1/3",  # pseudo-header fields in trailers
    "http2/8.1.2.6/1",  # content-length unlike the DATA
    "http2/8.1.2.6/2",  # ... over several DATA frames
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def h2spec(port, *args):
    """(passed, failed test ids) of a run against 127.0.0.1:port."""
    out = subprocess.run([H2SPEC, "-h", "127.0.0.1", "-p", str(port), "-o", "2", *args],
                         capture_output=True, timeout=600).stdout.decode(errors="replace")
    summary = re.search(r"(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed", out)
    assert summary, out[-2000:]
    failed, group, section = [], "", ""
    for line in out[out.find("Failures:"):].splitlines() if "Failures:" in out else []:
        if line and not line.startswith((" ", "Failures")):
            group = {"Hypertext": "http2", "HPACK:": "hpack", "Generic": "generic"}.get(
                line.split()[0], line)
        elif m := re.match(r"^\s+(\d+(?:\.\d+)*)\. ", line):
            section = m[1]
        elif m := re.match(r"^\s+× (\d+):", line):
            failed.append(f"{group}/{section}/{m[1]}")
    assert len(failed) == int(summary[4]), (failed, summary[0])
    return int(summary[2]), failed

# h2spec sends a HEADERS frame of 17,576 bytes here and expects FRAME_SIZE_ERROR, as if every
# server kept HTTP/2's default SETTINGS_MAX_FRAME_SIZE (16,384). ringkv's session advertises
# 256 KiB, so that a large request message comes in one DATA frame, read straight into its call's
# buffer: the frame is within the limit, and served. A frame past 256 KiB is refused with
# FRAME_SIZE_ERROR (h2spec's 4.2/2 for DATA; h2_session_test for any frame).
LARGER_FRAMES = {"http2/4.2/3"}


class ConformanceTest(unittest.TestCase):
    def test_the_session_alone_passes_every_test(self):
        port = free_port()
        echo = subprocess.Popen([ECHO, str(port)])
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    subprocess.run(["sleep", "0.05"])
            passed, failed = h2spec(port, "--strict")
        finally:
            echo.kill()
            echo.wait()
        self.assertLessEqual(set(failed), LARGER_FRAMES)
        self.assertGreaterEqual(passed, 145 - len(LARGER_FRAMES))

    def test_the_server_fails_only_where_it_answered_already(self):
        server = RingkvServer(SERVER, *SERVER_FLAGS)
        try:
            passed, failed = h2spec(int(server.address.rsplit(":", 1)[1]))
            self.assertIsNone(server.process.poll(), "the server died")
        finally:
            server.stop()
        self.assertEqual(set(failed) - ANSWERED_ALREADY - LARGER_FRAMES, set())
        self.assertGreaterEqual(passed, 145 - 4 - len(ANSWERED_ALREADY) - len(LARGER_FRAMES))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
