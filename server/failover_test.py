#!/usr/bin/env python3
"""Automatic failover on etcd (issue 23): a real etcd (Debian's etcd-server) on loopback,
real ringkv-servers in a group (--etcd, --group, --failover-timeout=2s), real kill -9 and
SIGSTOP, and writers on grpcio that count every acknowledged write.

- kill -9 rounds (ROUNDS: 20, 3 under a sanitizer): two servers with --min-replicas=1; two
  writers put unique keys without pause, each to whichever server acknowledges. Each round
  kills the primary and starts it again on its port, as systemd's Restart= would. Each time
  the group acknowledges writes again within the timeout + 1 s of the kill, in a higher term,
  and the restarted server rejoins as a replica. At the end every acknowledged write is on the
  last primary with its value: none lost.
- SIGSTOP: the primary (--min-replicas=0) stopped for longer than its lease. The other server
  takes over in a higher term, and the versions it gives are above term << 40. After SIGCONT
  the stopped server acknowledges no write (a writer keeps sending it writes throughout), and
  it rejoins as a replica of the new primary.
- An answer held past the fence: a write waits for its replica (stopped) while etcd is killed;
  once the primary's fence has closed, the replica runs again and acknowledges: the primary
  drops the connection instead of acknowledging the write. Writes are then refused, saying
  why, and reads are served.

Usage: failover_test.py SERVER_BINARY PROTO_DIR TOOLS_DIR [SERVER_FLAG...]
"""
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "testing"))
import group_writers  # noqa: E402
import python_stubs  # noqa: E402
import venv_main  # noqa: E402
from etcd_process import Etcd, free_port  # noqa: E402
from ringkv_server import LogReader, RingkvServer  # noqa: E402

SERVER, PROTO_DIR, TOOLS = sys.argv[1:4] if len(sys.argv) >= 4 else (None,) * 3
SERVER_FLAGS = sys.argv[4:]
SANITIZED = os.environ.get("RINGKV_SANITIZER", "none") not in ("", "none")
SLOW = 3 if SANITIZED else 1
ROUNDS = 3 if SANITIZED else 20
TTL_S = 2  # --failover-timeout.

grpc = kv_pb2 = kv_pb2_grpc = None  # Imported by setUpModule, under the venv.


def setUpModule():
    global grpc, kv_pb2, kv_pb2_grpc
    python_stubs.generate(PROTO_DIR)
    import grpc as grpc_module
    from ringkv.v1 import kv_pb2 as pb, kv_pb2_grpc as pb_grpc
    grpc, kv_pb2, kv_pb2_grpc = grpc_module, pb, pb_grpc


def wait_until(condition, timeout, describe, poll=0.05):
    deadline = time.monotonic() + timeout * SLOW
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"not so within {timeout * SLOW} s: {describe()}")
        time.sleep(poll)


def start_writers(addresses, count=2, pinned=()):
    return group_writers.Writers(grpc, kv_pb2, kv_pb2_grpc, addresses, count, pinned)


class FailoverTest(unittest.TestCase):
    def setUp(self):
        work = tempfile.mkdtemp(prefix="ringkv-failover-test-")
        self.addCleanup(shutil.rmtree, work, True)
        self.etcd = Etcd(work)
        self.etcd.start()
        self.addCleanup(self.etcd.kill)
        self.group = f"f{os.getpid()}"
        self.servers = {}  # Address -> RingkvServer.

    def start(self, port, *flags):
        server = RingkvServer(SERVER, "--threads=2", f"--listen=127.0.0.1:{port}",
                              f"--etcd={self.etcd.endpoint}", f"--group={self.group}",
                              f"--failover-timeout={TTL_S}s", *flags, *SERVER_FLAGS)
        server.log = LogReader(server)
        self.servers[server.address] = server

        def cleanup():
            if server.process.poll() is None:
                server.process.send_signal(signal.SIGCONT)
                server.stop()
        self.addCleanup(cleanup)
        return server

    def leader(self):
        return self.etcd.leader(self.group)

    def stats(self, address):
        with grpc.insecure_channel(address) as channel:
            return kv_pb2_grpc.KVStub(channel).Stats(kv_pb2.StatsRequest(), timeout=5)

    def following(self, address, primary):
        """Whether the server at `address` is a replica of `primary` with a whole image."""
        try:
            r = self.stats(address).replication
        except grpc.RpcError:
            return False
        return (r.role == "replica" and r.primary == primary and len(r.flows) == 2
                and all(f.state == "stable" for f in r.flows))

    def test_kill_primary_rounds(self):
        ports = [free_port(), free_port()]
        flags = ("--min-replicas=1",)
        for port in ports:
            self.start(port, *flags)
        addresses = [f"127.0.0.1:{p}" for p in ports]
        wait_until(self.leader, 10, lambda: "nobody was elected")
        writers = start_writers(addresses)
        self.addCleanup(writers.stop)
        times = []
        last_term = 0
        for round_ in range(ROUNDS):
            term, _, primary = wait_until(self.leader, 10, lambda: "no leader")
            self.assertGreater(term, last_term)
            last_term = term
            other = addresses[1 - addresses.index(primary)]
            wait_until(lambda: self.following(other, primary), 10,
                       lambda: f"round {round_}: {other} never followed {primary}")
            settled = time.monotonic()
            wait_until(lambda: writers.acks_after(settled, primary), 5,
                       lambda: f"round {round_}: no write acknowledged by {primary}")
            time.sleep(random.uniform(0.05, 0.5))  # The kill lands anywhere in the writes.
            victim = self.servers.pop(primary)
            victim.process.kill()
            killed = time.monotonic()
            victim.process.wait()
            victim.log.thread.join(5)
            victim.process.stderr.close()
            self.start(int(primary.rsplit(":", 1)[1]), *flags)
            first = wait_until(lambda: writers.acks_after(killed, other), TTL_S + 5,
                               lambda: f"round {round_}: {other} never took over")
            took = min(a[2] for a in first) - killed
            times.append(took)
            self.assertLess(took, (TTL_S + 1) * SLOW,
                            f"round {round_}: writable again {took:.2f} s after the kill")
        writers.stop()
        term, _, primary = self.leader()
        self.assertGreater(term, last_term)
        lost = writers.lost_on(primary)
        total = len(writers.acked)
        self.assertEqual(lost[:10], [], f"{len(lost)} of {total} acknowledged writes lost")
        times.sort()
        print(f"\n{ROUNDS} rounds, {total} acknowledged writes, none lost; writable again after "
              f"{times[len(times) // 2]:.2f} s (median), {times[-1]:.2f} s (max)",
              file=sys.stderr)

    def test_sigstop_fences_the_primary(self):
        a = self.start(free_port())
        wait_until(lambda: (self.leader() or (0, "", ""))[2] == a.address, 10,
                   lambda: "the first server was not elected")
        b = self.start(free_port())
        wait_until(lambda: self.following(b.address, a.address), 10,
                   lambda: "the second server never followed the first")
        first_term = self.leader()[0]
        writers = start_writers([a.address, b.address], count=1, pinned=[a.address])
        self.addCleanup(writers.stop)
        wait_until(lambda: len(writers.acked) > 100, 10, lambda: "no writes acknowledged")
        os.kill(a.process.pid, signal.SIGSTOP)
        wait_until(lambda: (self.leader() or (0, "", ""))[2] == b.address, TTL_S + 3,
                   lambda: f"{b.address} never took over: {self.leader()}")
        term = self.leader()[0]
        self.assertGreater(term, first_term)
        wait_until(lambda: writers.acks_after(0, b.address), 5, lambda: "b acknowledged nothing")
        resumed = time.monotonic()
        os.kill(a.process.pid, signal.SIGCONT)
        wait_until(lambda: self.following(a.address, b.address), 10,
                   lambda: f"{a.address} never rejoined as a replica of {b.address}")
        time.sleep(0.3)
        writers.stop()
        late = writers.acks_after(resumed, a.address)
        self.assertEqual(late, [], "the deposed primary acknowledged writes after SIGCONT")
        floor = term << 40
        new = writers.acks_after(0, b.address)
        self.assertTrue(all(version > floor for _, _, _, version in new),
                        f"a version of term {term} at or below {floor}")
        # What b acknowledged reaches a, its replica now.
        from_b = [k for k, ack in writers.acked.items() if ack[1] == b.address]
        wait_until(lambda: not writers.lost_on(a.address, from_b), 10,
                   lambda: "the replica lacks the new primary's writes")
    def test_an_answer_held_past_the_fence_is_not_sent(self):
        a = self.start(free_port(), "--min-replicas=1", "--min-replicas-timeout=30s")
        wait_until(lambda: (self.leader() or (0, "", ""))[2] == a.address, 10,
                   lambda: "the first server was not elected")
        b = self.start(free_port())
        wait_until(lambda: self.following(b.address, a.address), 10,
                   lambda: "the second server never followed the first")
        with grpc.insecure_channel(a.address) as channel:
            kv = kv_pb2_grpc.KVStub(channel)
            kv.Put(kv_pb2.PutRequest(key=b"before", value=b"1"), timeout=10)
            # The write waits for b's acknowledgement while a's lease runs out (etcd gone);
            # then b acknowledges: a ran the write before its deadline, but must not say so
            # after it.
            os.kill(b.process.pid, signal.SIGSTOP)
            held = kv.Put.future(kv_pb2.PutRequest(key=b"held", value=b"2"), timeout=30)
            time.sleep(0.2)
            self.assertFalse(held.done())
            self.etcd.kill()
            wait_until(lambda: self.stats(a.address).replication.group.fence_left_ms == 0,
                       TTL_S + 2, lambda: "a's fence never closed")
            os.kill(b.process.pid, signal.SIGCONT)
            with self.assertRaises(grpc.RpcError) as refused:
                held.result()
            self.assertIn(refused.exception.code(),
                          (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL))
            # Writes are refused, saying why; reads go on.
            with self.assertRaises(grpc.RpcError) as later:
                kv.Put(kv_pb2.PutRequest(key=b"after", value=b"3"), timeout=10)
            self.assertIn("not the group's primary now", later.exception.details())
            self.assertEqual(kv.Get(kv_pb2.GetRequest(key=b"before"), timeout=10).value, b"1")


if __name__ == "__main__":
    venv_main.run(TOOLS)
