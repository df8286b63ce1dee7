#!/usr/bin/env python3
"""The packaging: the systemd unit passes `systemd-analyze verify` (where systemd is present;
skipped otherwise), and the example flags file starts a real ringkv-server through --flagfile,
with its own conventions: - or _ in names, comments, a later flag overriding the file's, nested
files, and usage errors that exit 2 naming the file and line.

Usage: packaging_test.py SERVER_BINARY
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server",
                                "testing"))
from ringkv_server import RingkvServer  # noqa: E402

SERVER = sys.argv[1] if len(sys.argv) > 1 else None
HERE = os.path.dirname(os.path.abspath(__file__))


class PackagingTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ringkv-packaging-")
        self.addCleanup(shutil.rmtree, self.dir)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    @unittest.skipUnless(shutil.which("systemd-analyze"), "systemd-analyze is not installed")
    def test_unit_verifies(self):
        with open(os.path.join(HERE, "ringkv-server.service")) as f:
            unit = f.read()
        self.assertIn("ExecStart=/usr/local/bin/ringkv-server ", unit)
        for line in ("DynamicUser=yes", "StateDirectory=ringkv", "LimitNOFILE=65536",
                     "ProtectSystem=strict", "NoNewPrivileges=yes", "KillSignal=SIGTERM"):
            self.assertIn(line + "\n", unit)
        # verify checks that ExecStart's program exists: point it at the one just built.
        unit = unit.replace("/usr/local/bin/ringkv-server", os.path.abspath(SERVER))
        path = self.write("ringkv-server.service", unit)
        r = subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual((r.returncode, r.stderr.strip()), (0, ""), r.stdout)
        # And it does fail on a broken unit, so the check above means something.
        broken = self.write("ringkv-server.service", unit.replace("ProtectSystem=strict",
                                                                  "ProtectSystem=everything"))
        r = subprocess.run(["systemd-analyze", "verify", broken], capture_output=True, text=True,
                           timeout=60)
        self.assertIn("Failed to parse protect system value", r.stderr)

    def test_example_flags_file_starts_the_server(self):
        data = os.path.join(self.dir, "data")
        # The example's port may be taken here: a later flag overrides the file's.
        server = RingkvServer(SERVER, f"--flagfile={os.path.join(HERE, 'ringkv-server.flags')}",
                              "--listen=127.0.0.1:0", f"--data-dir={data}")
        server.stop()
        self.assertTrue(os.path.exists(os.path.join(data, "MANIFEST")))

    def listening_line(self, *args):
        process = subprocess.Popen([SERVER, "--listen=127.0.0.1:0", *args],
                                   stderr=subprocess.PIPE, text=True)
        try:
            for line in process.stderr:
                if "listening on" in line:
                    return line
            self.fail(f"no 'listening on' line from {args}")
        finally:
            process.send_signal(signal.SIGTERM)
            self.assertEqual(process.wait(timeout=10), 0)
            process.stderr.close()

    def test_flag_file_conventions(self):
        inner = self.write("inner.flags", "# nested\n--threads=1\n")
        outer = self.write("outer.flags", f"  # comment\n\n--max-key-bytes=9  \n--threads=3\n"
                                          f"--flagfile={inner}\n--spin_us=0\n")
        # In order: the inner file's --threads=1 after the outer's 3; then the command line's.
        self.assertIn("(h2 transport, 1 worker,", self.listening_line(f"--flagfile={outer}"))
        self.assertIn("(h2 transport, 2 workers,",
                      self.listening_line(f"--flagfile={outer}", "--threads=2"))
        for text, why in (("--no-such-flag=1\n", "unknown flag --no_such_flag"),
                          ("--threads=many\n", "bad value 'many' for --threads"),
                          ("--listen=127.0.0.1:0\nlisten=x\n", "line 2: expected --flag=value")):
            path = self.write("bad.flags", text)
            r = subprocess.run([SERVER, f"--flagfile={path}"], capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(why, r.stderr)
        r = subprocess.run([SERVER, "--flagfile", os.path.join(self.dir, "missing")],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--flagfile: cannot read", r.stderr)
        loop = self.write("loop.flags", f"--flagfile={os.path.join(self.dir, 'loop.flags')}\n")
        r = subprocess.run([SERVER, f"--flagfile={loop}"], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("nest too deep", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
