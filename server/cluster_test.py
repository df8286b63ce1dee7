#!/usr/bin/env python3
"""Group membership on etcd (issue 23), with a real etcd (Debian's etcd-server) started by the
test on loopback with a data directory of its own, real ringkv-servers and the real CLI.
server/failover_test.py has the failovers.

- The first server of a new group is elected its primary, and the next follows it; each has
  an entry in the group, listed by `ringkv cluster status` (text and --json) with address,
  role, primary and positions; the positions follow the writes.
- A server killed with SIGKILL drops out once its lease expires (--failover-timeout=2s, within
  a few seconds); one stopped with SIGTERM drops out at once (its lease revoked).
- etcd killed under a running primary: no write is acknowledged once its lease could have run
  out (2 s after the kill at most), reads go on, and the log says why; etcd restarted on the
  same directory and port: writes resume and the server's entry is back.
- TLS to etcd: an etcd that asks for client certificates; a server and the CLI with
  --etcd-ca, --etcd-cert and --etcd-key join, elect, list the group and find the primary; a
  server without a client certificate is refused at start, naming the endpoint.
- An etcd that cannot be reached refuses the start (exit status 2), naming the endpoint; the
  flags are checked (--etcd without --group, a short --failover-timeout, --replica-of).

Usage: cluster_test.py SERVER_BINARY CLI_BINARY [SERVER_FLAG...]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "testing"))
import certs  # noqa: E402
from etcd_process import Etcd, free_port  # noqa: E402
from ringkv_server import LogReader, RingkvServer  # noqa: E402

SERVER, CLI = sys.argv[1:3] if len(sys.argv) >= 3 else (None, None)
SERVER_FLAGS = sys.argv[3:]
SLOW = 3 if os.environ.get("RINGKV_SANITIZER", "none") not in ("", "none") else 1


def wait_until(predicate, timeout, describe):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {describe()}")


class ClusterTest(unittest.TestCase):
    def setUp(self):
        work = tempfile.mkdtemp(prefix="ringkv-cluster-test-")
        self.addCleanup(shutil.rmtree, work, True)
        self.etcd = Etcd(work)
        self.etcd.start()
        self.addCleanup(self.etcd.kill)
        self.group = f"g{os.getpid()}"

    def start(self, *flags):
        server = RingkvServer(SERVER, "--threads=2", f"--etcd={self.etcd.endpoint}",
                              f"--group={self.group}", "--failover-timeout=2s", *flags,
                              *SERVER_FLAGS)
        server.log = LogReader(server)
        server.killed = False

        def cleanup():
            if server.process.poll() is None:
                server.stop()
        self.addCleanup(cleanup)
        return server

    def cli(self, *args, addr=None):
        return subprocess.run([CLI, *([f"--addr={addr}"] if addr else []), *args],
                              capture_output=True, text=True, timeout=30)

    def members(self):
        """The group's members by address: {address: {field: value}}."""
        r = self.cli("--json", "cluster", "status", f"--etcd={self.etcd.endpoint}",
                     f"--group={self.group}")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = {}
        for m in json.loads(r.stdout)["members"]:
            fields = dict(f.split("=", 1) for f in m["entry"].split(" "))
            out[fields["address"]] = fields
        return out

    def test_members_are_listed_and_drop_out(self):
        primary = self.start()
        # The first server of a new group is elected; the next follows it.
        wait_until(lambda: (self.etcd.leader(self.group) or (0, "", ""))[2] == primary.address,
                   10 * SLOW, lambda: self.etcd.leader(self.group))
        replica = self.start()
        wait_until(lambda: {a: m["role"] for a, m in self.members().items()} ==
                   {primary.address: "primary", replica.address: "replica"}, 10, self.members)
        got = self.members()
        self.assertEqual(got[primary.address]["role"], "primary")
        self.assertEqual(got[replica.address]["role"], "replica")
        self.assertEqual(got[replica.address]["primary"], primary.address)
        # Writes made before a worker's full sync cuts reach the replica in its image, not as
        # records: count positions only once the image is whole (tier 2).
        wait_until(lambda: self.members()[replica.address].get("tier") == "2", 10 * SLOW,
                   self.members)
        for i in range(20):
            put = self.cli("put", f"k{i}", "v", addr=primary.address)
            self.assertEqual(put.returncode, 0, put.stderr)
        # Renewed about three times a lease: the positions follow.
        wait_until(lambda: sum(int(p) for p in
                               self.members()[replica.address]["positions"].split(",")) >= 20,
                   10, self.members)
        text = self.cli("cluster", "status", f"--etcd={self.etcd.endpoint}",
                        f"--group={self.group}")
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn(f"group {self.group}: 2 members", text.stdout)
        self.assertIn(f"primary: {primary.address}", text.stdout)
        # SIGKILL: gone once the lease expires. SIGTERM: gone at once.
        replica.process.kill()
        replica.process.wait()
        replica.process.stderr.close()
        started = time.time()
        wait_until(lambda: replica.address not in self.members(), 10 * SLOW, self.members)
        self.assertGreater(time.time() - started, 0.5)  # Not before the lease ran out.
        primary.stop()
        self.assertNotIn(primary.address, self.members())

    def test_etcd_lost_and_back(self):
        server = self.start()
        wait_until(lambda: self.cli("put", "k", "v", addr=server.address).returncode == 0,
                   10 * SLOW, lambda: "the lone member never served writes")
        self.etcd.kill()
        killed = time.monotonic()
        # Writes stop before the lease (2 s, renewed last before the kill) could run out, and
        # none is acknowledged after; reads go on.
        last_ok = killed
        while time.monotonic() < killed + 4:
            began = time.monotonic()
            put = self.cli("put", "k", "w", addr=server.address)
            if put.returncode == 0:
                self.assertLess(began, killed + 2, "a write acknowledged without a lease")
                last_ok = time.monotonic()
            else:
                self.assertIn("not the group's primary now", put.stderr)
        self.assertLess(last_ok, killed + 2)
        get = self.cli("get", "k", addr=server.address)
        self.assertEqual(get.returncode, 0, get.stderr)
        server.log.wait_for("cannot renew this server's membership", timeout=15 * SLOW)
        # etcd back on its directory: the server leads again and serves writes.
        self.etcd.start()
        wait_until(lambda: self.cli("put", "k", "x", addr=server.address).returncode == 0,
                   20 * SLOW, lambda: "writes never resumed")
        wait_until(lambda: server.address in self.members(), 20 * SLOW, self.members)

    def test_tls_to_etcd(self):
        work = tempfile.mkdtemp(prefix="ringkv-etcd-tls-")
        self.addCleanup(shutil.rmtree, work, True)
        certs.make_certificates(work)
        etcd = Etcd(work, certs=work)
        etcd.start()
        self.addCleanup(etcd.kill)
        endpoint = f"--etcd=https://{etcd.endpoint}"
        client_tls = [f"--etcd-ca={work}/ca.pem", f"--etcd-cert={work}/client.pem",
                      f"--etcd-key={work}/client.key"]
        # Without a client certificate etcd refuses the connection, and the server its start.
        r = subprocess.run([SERVER, "--listen=127.0.0.1:0", endpoint, "--group=t",
                            f"--etcd-ca={work}/ca.pem", *SERVER_FLAGS],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("cannot join group t", r.stderr)
        self.assertIn(etcd.endpoint, r.stderr)
        server = RingkvServer(SERVER, "--threads=1", endpoint, "--group=t",
                              "--failover-timeout=2s", *client_tls, *SERVER_FLAGS)
        self.addCleanup(server.stop)
        wait_until(lambda: (etcd.leader("t") or (0, "", ""))[2] == server.address, 10 * SLOW,
                   lambda: f"never elected over TLS: {etcd.leader('t')}")
        r = self.cli("cluster", "status", endpoint, "--group=t", *client_tls)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"primary: {server.address}", r.stdout)
        r = self.cli(endpoint, "--group=t", *client_tls, "put", "k", "v")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.cli("get", "k", addr=server.address).stdout.strip(), "v")
        r = self.cli("cluster", "status", endpoint, "--group=t", f"--etcd-cert={work}/client.pem")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--etcd-cert and --etcd-key go together", r.stderr)

    def test_bad_setups(self):
        dead = f"127.0.0.1:{free_port()}"
        r = subprocess.run([SERVER, "--listen=127.0.0.1:0", f"--etcd={dead}", "--group=g",
                            *SERVER_FLAGS], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("cannot join group g", r.stderr)
        self.assertIn(dead, r.stderr)
        for flags, says in (((f"--etcd={self.etcd.endpoint}",), "--etcd and --group go together"),
                            ((f"--etcd={self.etcd.endpoint}", "--group=g",
                              "--failover-timeout=1s"), "--failover-timeout must be"),
                            ((f"--etcd={self.etcd.endpoint}", "--group=g",
                              "--replica-of=127.0.0.1:1"), "--replica-of does not go with"),
                            (("--acks=isr", "--min-replicas=1"), "--acks=isr needs --etcd"),
                            ((f"--etcd={self.etcd.endpoint}", "--group=g", "--acks=isr"),
                             "--min-replicas of 1 or more"),
                            (("--acks=all",), "--acks is count or isr")):
            r = subprocess.run([SERVER, *flags], capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(says, r.stderr)
        r = self.cli("cluster", "status", f"--etcd={dead}", "--group=g")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn(dead, r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
