#!/usr/bin/env python3
"""Automatic failover on etcd (issue 23): a real etcd (Debian's etcd-server) on loopback,
real ringkv-servers in a group (--etcd, --group, --failover-timeout=2s), real kill -9 and
SIGSTOP, and writers on grpcio that count every acknowledged write.

- kill -9 rounds: three servers with --min-replicas=1 --acks=isr (ROUNDS: 20, 3 under a
  sanitizer), then two with --min-replicas=1 (ROUNDS / 4, at least 1); two writers put unique
  keys without pause, each to whichever server acknowledges. Each round kills the primary and
  starts it again on its port, as systemd's Restart= would. Each time the group acknowledges writes again
  within the timeout + 1 s of the kill, in a higher term, and the restarted server rejoins as a
  replica. At the end every acknowledged write is on the last primary with its value: none
  lost; with three, some flows of the surviving replicas resumed from their positions on the
  new primary (a partial resync) instead of a full sync. (With three servers and --acks=count, a write needs one replica per worker, not the
  same one on both: a failover may lose writes, which the in-sync set prevents.)
- Linearizability: four clients run puts, linearizable gets and compare-and-sets on three keys
  of three servers with --acks=isr across kill -9 failovers (LINEARIZABLE_ROUNDS: 3, 1 under a
  sanitizer); each key's history, with unknown outcomes as such, passes the checker of
  testing/linearizability.py (itself tested on histories known to be bad).
- The in-sync set: of three servers with --acks=isr, a replica stopped by SIGSTOP leaves the
  set and writes go on, without pausing again for it; once the other two are killed it runs again, and does not take over
  until the set's key is deleted (the way out its log names).
- SIGSTOP: the primary (--min-replicas=0) stopped for longer than its lease. The other server
  takes over in a higher term, and the versions it gives are above term << 40. After SIGCONT
  the stopped server acknowledges no write (a writer keeps sending it writes throughout), and
  it rejoins as a replica of the new primary.
- Clients find the primary: the CLI with --etcd/--group and with a list of addresses runs
  increments on two counters while the primary is killed -9 and restarted. Each call either
  succeeds, fails saying it may have been applied (the kill cut it off), or fails unrun; every
  counter ends between its acknowledged increments and those plus the unknown ones (none
  applied twice), calls that met the failover were sent again and succeeded, and the load
  generator, on the group through etcd, follows the primary across the failover.
- A partition (network namespaces: each server in its own, on a private bridge with etcd):
  the primary's link goes down while a client in its namespace keeps writing to it; its
  last acknowledgement arrives before the new primary's first is asked for, within its
  lease of the cut; with the link back it rejoins as a replica. With two servers and
  --min-replicas=0 it counts what it dropped; with three, --min-replicas=1 --acks=isr, every
  write it acknowledged is on the new primary.
- A planned failover (`ringkv failover --to`): of three servers with --acks=isr under
  writers, the primary hands the leadership to a replica in the next term; no acknowledged
  write is lost, writes pause for less than a second, and the old primary and the other
  replica follow the new one from their positions (no full sync).
- A write that may have run is not sent again: a primary whose replica is stopped runs an
  increment it cannot acknowledge; the CLI given several addresses reports that it may have
  been applied, and the counter moved once.
- An answer held back by its client past the fence: a client that grants no flow-control
  window gets the headers of a write's OK answer but not its trailers; once etcd is gone and
  the primary's fence has closed, the server closes that connection rather than send them.
- An answer held past the fence: a write waits for its replica (stopped) while etcd is killed;
  once the primary's fence has closed, the replica runs again and acknowledges: the primary
  answers UNAVAILABLE, saying it lost the leadership first, instead of acknowledging the write
  (a unary Put, and a Stream's PUT, which ends the Stream). Writes are then refused, saying
  why, and reads are served, but not linearizable ones (the ringkv-consistency header), which
  a replica refuses too and the new primary serves.

Usage: failover_test.py SERVER_BINARY PROTO_DIR TOOLS_DIR [SERVER_FLAG...]
(the environment's RINGKV_CLI and RINGKV_LOADGEN name the client programs)
"""
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "testing"))
import group_writers  # noqa: E402
import h2_client  # noqa: E402
import linearizability  # noqa: E402
import python_stubs  # noqa: E402
import register_clients  # noqa: E402
import venv_main  # noqa: E402
from etcd_process import Etcd, free_port  # noqa: E402
from ringkv_server import LogReader, RingkvServer, sigstop  # noqa: E402

SERVER, PROTO_DIR, TOOLS = sys.argv[1:4] if len(sys.argv) >= 4 else (None,) * 3
SERVER_FLAGS = sys.argv[4:]
CLI = os.environ.get("RINGKV_CLI")
LOADGEN = os.environ.get("RINGKV_LOADGEN")
SANITIZER = os.environ.get("RINGKV_SANITIZER") or "none"
SANITIZED = SANITIZER != "none"
# Deadlines' factor: TSan runs the three servers, etcd and the writers on two cores at several
# times ASan's cost (a TSan round once took 9.02 s where the release build takes under 3).
SLOW = {"none": 1, "thread": 5}.get(SANITIZER, 3)
ROUNDS = 3 if SANITIZED else 20
LINEARIZABLE_ROUNDS = 1 if SANITIZED else 3
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
        self.resumed_by_killed = 0  # resumed() of the servers killed.

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

    def kill_and_restart(self, address, flags):
        """kill -9 of the server at `address`, then a new one on its port, as systemd's
        Restart= would; the time of the kill."""
        victim = self.servers.pop(address)
        victim.process.kill()
        killed = time.monotonic()
        victim.process.wait()
        victim.log.thread.join(5)
        victim.process.stderr.close()
        self.resumed_by_killed += self.resumed(victim)
        self.start(int(address.rsplit(":", 1)[1]), *flags)
        return killed

    @staticmethod
    def resumed(server):
        """The flows that resumed from their positions (a partial resync), from its log."""
        return sum(line.count("partial resync from") for line in server.log.lines)

    def group_state(self):
        """The group's keys in etcd, and the servers' last log lines, for failure messages."""
        keys = self.etcd.etcdctl("get", "--prefix", f"/ringkv/{self.group}/").stdout
        logs = "".join(f"\n{a}:\n" + "".join(s.log.lines[-12:]) for a, s in self.servers.items())
        return f"etcd:\n{keys}{logs}"

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

    def test_kill_primary_rounds_in_sync_set(self):
        self.kill_primary_rounds(3, ("--min-replicas=1", "--acks=isr"), ROUNDS)

    def test_kill_primary_rounds_two_servers(self):
        self.kill_primary_rounds(2, ("--min-replicas=1",), max(1, ROUNDS // 4))

    def kill_primary_rounds(self, count, flags, rounds):
        ports = [free_port() for _ in range(count)]
        for port in ports:
            self.start(port, *flags)
        addresses = [f"127.0.0.1:{p}" for p in ports]
        wait_until(self.leader, 10, lambda: "nobody was elected")
        writers = start_writers(addresses)
        self.addCleanup(writers.stop)
        times = []
        last_term = 0
        for round_ in range(rounds):
            term, _, primary = wait_until(self.leader, 10, lambda: "no leader")
            self.assertGreater(term, last_term)
            last_term = term
            others = [a for a in addresses if a != primary]
            for other in others:
                wait_until(lambda: self.following(other, primary), 10,
                           lambda: f"round {round_}: {other} never followed {primary}")
            settled = time.monotonic()
            wait_until(lambda: writers.acks_after(settled, primary), 5,
                       lambda: f"round {round_}: no write acknowledged by {primary}; "
                       f"{self.group_state()}")
            time.sleep(random.uniform(0.05, 0.5))  # The kill lands anywhere in the writes.
            killed = self.kill_and_restart(primary, flags)
            first = wait_until(lambda: [a for a in writers.acks_after(killed) if a[1] != primary],
                               TTL_S + 5, lambda: f"round {round_}: nobody took over; "
                               f"{self.group_state()}")
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
        # A replica re-pointed to the new primary resumes from its positions unless it stands
        # ahead of it on that worker (the new primary has the highest positions in all, so that
        # is rare); a replica's connections break only when its primary dies, so each partial
        # resync counted is one of those.
        resumed = self.resumed_by_killed + sum(map(self.resumed, self.servers.values()))
        if count > 2:
            self.assertGreater(resumed, 0, self.group_state())
        times.sort()
        print(f"\n{count} servers, {' '.join(flags)}: {rounds} rounds, {total} acknowledged "
              f"writes, none lost; writable again after {times[len(times) // 2]:.2f} s (median), "
              f"{times[-1]:.2f} s (max); {resumed} flows resumed from their positions on a new "
              "primary", file=sys.stderr)

    def test_histories_stay_linearizable_across_failovers(self):
        flags = ("--min-replicas=1", "--acks=isr")
        ports = [free_port() for _ in range(3)]
        for port in ports:
            self.start(port, *flags)
        addresses = [f"127.0.0.1:{p}" for p in ports]
        clients = register_clients.RegisterClients(grpc, kv_pb2, kv_pb2_grpc, addresses,
                                                   keys=["k0", "k1", "k2"])
        self.addCleanup(clients.stop)
        for round_ in range(LINEARIZABLE_ROUNDS):
            _, _, primary = wait_until(self.leader, 10, lambda: "no leader")
            wait_until(lambda: len(self.in_sync()) == 2, 10,
                       lambda: f"round {round_}: the in-sync set never held both replicas: "
                       f"{self.group_state()}")
            time.sleep(random.uniform(0.2, 0.6))  # The kill lands anywhere in the calls.
            killed = self.kill_and_restart(primary, flags)
            wait_until(lambda: clients.completed_after(killed + 0.1), TTL_S + 5,
                       lambda: f"round {round_}: no call completed after the kill: "
                       f"{self.group_state()}")
        time.sleep(0.5)
        clients.stop()
        checked = time.monotonic()
        bad = linearizability.check_history(clients.history)
        took = time.monotonic() - checked
        self.assertEqual(bad, {}, "keys whose histories are not linearizable "
                         "(ops explained, ops): " + repr(bad) + self.around(clients.history, bad))
        self.assertEqual(clients.inconsistent_versions(), {})
        # The checker can fail on this very history: a read made to return a value that two
        # completed writes had already replaced is caught.
        stale = self.staled_read(clients.history)
        self.assertIsNotNone(stale, "no read to make stale")
        self.assertEqual(list(linearizability.check_history(stale)), [stale[-1][0]])
        kinds = {k: sum(1 for _, op in clients.history if op.kind == k)
                 for k in ("put", "get", "cas")}
        self.assertTrue(all(kinds.values()), kinds)
        print(f"\n{LINEARIZABLE_ROUNDS} failovers, {len(clients.history)} calls recorded "
              f"({kinds}; {clients.counts}): linearizable, checked in {took:.1f} s",
              file=sys.stderr)

    @staticmethod
    def around(history, bad):
        """For a failure message: each bad key's ops in order of invocation, around the most
        that any order explained (where the checker got stuck)."""
        out = ""
        for key, (explained, _) in bad.items():
            ops = sorted((op for k, op in history if k == key), key=lambda op: op.call)
            start = max(0, explained - 12)
            out += f"\n{key!r}, ops {start} on (times relative to the first):"
            t0 = ops[0].call
            for op in ops[start:explained + 8]:
                ret = "unknown" if op.ret is None else f"{op.ret - t0:.4f}"
                out += (f"\n  client {op.client} {op.kind} value={op.value!r} "
                        f"expect={op.expect!r} result={op.result!r} ok={op.ok} "
                        f"call={op.call - t0:.4f} ret={ret}")
        return out

    @staticmethod
    def staled_read(history):
        """A key's history, with its first read that can be made so made to return a value
        replaced by a write that began after it completed (and completed before the read
        began), or None. The first: a search that rejects it explores only what came
        before, so it stays small."""
        writes_done = {}  # key -> [(ret, value)] of known writes, in order of completion.
        for key, op in sorted(history, key=lambda kv: kv[1].call):
            if op.kind in ("put", "cas") and op.ok and op.ret is not None:
                writes_done.setdefault(key, []).append((op.ret, op.value))
        for key, op in sorted(history, key=lambda kv: kv[1].call):
            if op.kind != "get":
                continue
            done = sorted(w for w in writes_done.get(key, []) if w[0] < op.call)
            if len(done) < 2:
                continue
            old = done[-2][1]
            earlier_calls = [o for k, o in history if k == key and o.value == done[-1][1]]
            if old == op.result or earlier_calls[0].call <= done[-2][0]:
                continue  # The newer write must begin after the older one completed.
            return [(k, o) for k, o in history if k == key and o is not op] + \
                [(key, op._replace(result=old))]
        return None

    def test_only_the_in_sync_set_takes_over(self):
        flags = ("--min-replicas=1", "--acks=isr")
        a = self.start(free_port(), *flags)
        wait_until(lambda: (self.leader() or (0, "", ""))[2] == a.address, 10,
                   lambda: "the first server was not elected")
        b, c = self.start(free_port(), *flags), self.start(free_port(), *flags)
        wait_until(lambda: self.in_sync() == {b.address, c.address}, 10,
                   lambda: f"the in-sync set never held both replicas: {self.group_state()}")
        writers = start_writers([a.address], count=1)
        self.addCleanup(writers.stop)
        # c stops acknowledging: it leaves the set after half of --min-replicas-timeout, and
        # writes are acknowledged again with b alone.
        sigstop(c.process.pid)
        wait_until(lambda: self.in_sync() == {b.address}, 5,
                   lambda: f"c never left the in-sync set: {self.group_state()}")
        left = time.monotonic()
        wait_until(lambda: writers.acks_after(left, a.address), 5,
                   lambda: "no write acknowledged after c left the set")
        # ... and they go on: c, stopped with its connections open, is not asked to join
        # again (the workers would wait for it).
        time.sleep(1.5)
        times = sorted(t for _, _, t, _ in writers.acks_after(left, a.address))
        gaps = [later - earlier for earlier, later in zip(times, times[1:] + [time.monotonic()])]
        self.assertLess(max(gaps), 1.0 * SLOW, f"writes paused {max(gaps):.2f} s after c left")
        writers.stop()
        # a and b die; c, which lacks acknowledged writes, runs again: it must not take over.
        for victim in (a, b):
            victim.process.kill()
            victim.process.wait()
        os.kill(c.process.pid, signal.SIGCONT)
        c.log.wait_for("is not in the in-sync set", TTL_S + 5)
        time.sleep(1)
        self.assertIsNone(self.leader())
        # The way out the log names: deleting the key lets c take over, losing what only a
        # and b held.
        self.etcd.etcdctl("del", f"/ringkv/{self.group}/in_sync")
        wait_until(lambda: (self.leader() or (0, "", ""))[2] == c.address, TTL_S + 3,
                   lambda: f"c never took over: {self.group_state()}")

    def in_sync(self):
        """The addresses of the in-sync set's members (cluster/membership.h)."""
        r = self.etcd.etcdctl("get", "--print-value-only", f"/ringkv/{self.group}/in_sync")
        if r.returncode != 0 or not r.stdout.strip():
            return set()
        ids = r.stdout.split()[2].split(",")
        addresses = set()
        for server_id in ids:
            entry = self.etcd.etcdctl("get", "--print-value-only",
                                      f"/ringkv/{self.group}/members/{server_id}").stdout
            fields = dict(f.split("=", 1) for f in entry.split() if "=" in f)
            addresses.add(fields.get("address", server_id))
        return addresses

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
        sigstop(a.process.pid)
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
        # The deposed primary went on from its positions, or (where it held records b never
        # got: writes it acknowledged without a replica) full-synced and counted the keys that
        # dropped: at least every write it acknowledged that b lacks.
        from_a = [k for k, ack in writers.acked.items() if ack[1] == a.address]
        lost = writers.lost_on(b.address, from_a)
        flows = self.stats(a.address).replication.flows
        self.assertGreaterEqual(sum(f.dropped_keys for f in flows), len(lost), str(flows))
        rejoined = sum(("partial resync from" in line) + ("the full sync drops" in line)
                       for line in a.log.lines)
        self.assertGreaterEqual(rejoined, 2, "".join(a.log.lines[-10:]))
        print(f"\nthe deposed primary: {len(lost)} of its {len(from_a)} acknowledged writes "
              f"never reached the new primary; dropped "
              f"{sum(f.dropped_records for f in flows)} records on "
              f"{sum(f.dropped_keys for f in flows)} keys", file=sys.stderr)
        # A linearizable read goes to the primary: the replica refuses it, naming b; b serves it.
        key = from_b[-1]
        with grpc.insecure_channel(a.address) as channel:
            with self.assertRaises(grpc.RpcError) as refused:
                kv_pb2_grpc.KVStub(channel).Get(kv_pb2.GetRequest(key=key), timeout=10,
                                                metadata=register_clients.CONSISTENCY)
            self.assertIn(f"read-only replica of {b.address}", refused.exception.details())
        with grpc.insecure_channel(b.address) as channel:
            got = kv_pb2_grpc.KVStub(channel).Get(kv_pb2.GetRequest(key=key), timeout=10,
                                                  metadata=register_clients.CONSISTENCY)
            self.assertEqual(got.value, writers.acked[key][0])
    def cli(self, *args, timeout=60):
        """The CLI's exit status, output and seconds taken."""
        started = time.monotonic()
        r = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)
        return r.returncode, r.stdout.strip(), r.stderr.strip(), time.monotonic() - started

    def start_group(self, flags):
        """Three servers with `flags`, once one leads and the others follow it: their
        addresses, the term and the primary."""
        ports = [free_port() for _ in range(3)]
        for port in ports:
            self.start(port, *flags)
        addresses = [f"127.0.0.1:{p}" for p in ports]
        term, _, primary = wait_until(self.leader, 10, lambda: "nobody was elected")
        for other in addresses:
            if other != primary:
                wait_until(lambda: self.following(other, primary), 10,
                           lambda: f"{other} never followed {primary}")
        return addresses, term, primary

    def test_clients_find_the_primary_and_never_apply_a_write_twice(self):
        flags = ("--min-replicas=1", "--acks=isr")
        addresses, _, primary = self.start_group(flags)
        etcd = (f"--etcd={self.etcd.endpoint}", f"--group={self.group}")
        routes = {"etcd": etcd, "list": (f"--addr={','.join(addresses)}",)}
        wait = f"--failover-wait={10 * SLOW}"
        # Without a primary a call says where it looked, and gives up when told to.
        rc, _, err, _ = self.cli(f"--etcd={self.etcd.endpoint}", "--group=nobody",
                                 "--failover-wait=0.3", "get", "k")
        self.assertEqual(rc, 3, err)
        self.assertIn("group nobody on etcd", err)
        self.assertIn("has no primary now", err)
        # Counters incremented through each route while the primary is killed: each call's
        # outcome is kept (acknowledged with the sum it returned, unknown, or unrun).
        outcomes = {name: [] for name in routes}
        stop = threading.Event()

        def incr(name):
            while not stop.is_set():
                rc, out, err, took = self.cli(*routes[name], wait, "incr", f"counter-{name}")
                if rc == 0:
                    outcomes[name].append(("acked", int(out), took))
                elif rc == 3 and "may have been applied" in err:
                    outcomes[name].append(("unknown", err, took))
                else:
                    outcomes[name].append(("unrun", f"rc {rc}: {err}", took))
        threads = [threading.Thread(target=incr, args=(n,)) for n in routes]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: all(len(o) >= 5 for o in outcomes.values()), 30,
                       lambda: f"increments stalled: {outcomes}")
            before = {n: len(o) for n, o in outcomes.items()}
            # The load generator, on the group through etcd, runs across the failover.
            loadgen = subprocess.Popen(
                [LOADGEN, *etcd, f"--duration={(TTL_S + 10) * SLOW}", "--keys=50",
                 "--ratio=1:1", "--concurrency=2", "--progress=false"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.addCleanup(loadgen.kill)
            # Past its pre-load (50 keys and the 2 counters on the primary), into the run.
            wait_until(lambda: sum(s.keys for s in self.stats(primary).shards) >= 52, 10,
                       lambda: f"the load generator's pre-load never landed: {loadgen.poll()}")
            time.sleep(0.2)
            killed = self.kill_and_restart(primary, flags)
            _, _, new_primary = wait_until(
                lambda: (self.leader() or (0, "", ""))[2] not in ("", primary) and self.leader(),
                TTL_S + 5, lambda: f"nobody took over: {self.group_state()}")
            wait_until(lambda: all(sum(kind == "acked" for kind, *_ in o[before[n]:]) >= 5
                                   for n, o in outcomes.items()), 30 * SLOW,
                       lambda: f"no increments after the failover: {outcomes}; "
                       f"{self.group_state()}")
        finally:
            stop.set()
            for t in threads:
                t.join()
        took_over = time.monotonic() - killed
        for name, calls in outcomes.items():
            acked = [value for kind, value, _ in calls if kind == "acked"]
            unknown = sum(kind == "unknown" for kind, *_ in calls)
            unrun = [value for kind, value, _ in calls if kind == "unrun"]
            self.assertEqual(unrun, [], f"{name}: calls failed unrun within the wait")
            self.assertEqual(len(set(acked)), len(acked), f"{name}: a sum returned twice")
            rc, out, err, _ = self.cli(*routes[name], "--linearizable", "get",
                                       f"counter-{name}")
            self.assertEqual(rc, 0, err)
            final = int(out)
            self.assertGreaterEqual(final, max(acked), name)
            # Every acknowledged increment is there (none lost), and none is there twice.
            self.assertGreaterEqual(final, len(acked), f"{name}: acknowledged increments lost")
            self.assertLessEqual(final, len(acked) + unknown,
                                 f"{name}: {final} > {len(acked)} acknowledged + {unknown} "
                                 "unknown: an increment was applied twice")
            # The calls that met the failover waited for the new primary, and succeeded.
            waited = [took for kind, _, took in calls[before[name]:] if kind == "acked"]
            self.assertGreater(max(waited), 0.5, f"{name}: no call waited out the failover")
            print(f"\n{name}: {len(acked)} increments acknowledged, {unknown} unknown, counter "
                  f"{final}; the longest call took {max(waited):.2f} s across a failover of "
                  f"{took_over:.2f} s", file=sys.stderr)
        # The load generator found the primary through etcd, and followed it to the new one
        # (the calls the kill cut are its errors: exit status 1).
        out, err = loadgen.communicate(timeout=60 * SLOW)
        self.assertIn(loadgen.returncode, (0, 1), err)
        self.assertIn(f"followed the primary: {primary} -> {new_primary} at ", out, err)
        self.assertNotIn("the run ends", out)
        self.assertEqual(self.leader()[2], new_primary)
        self.assertGreaterEqual(sum(s.keys for s in self.stats(new_primary).shards), 52)
        print(out, file=sys.stderr)

    def test_a_planned_failover_loses_nothing_and_pauses_writes_briefly(self):
        addresses, term, primary = self.start_group(("--min-replicas=1", "--acks=isr"))
        others = [a for a in addresses if a != primary]
        wait_until(lambda: len(self.in_sync()) == 2, 10, lambda: "the in-sync set never filled")
        writers = start_writers(addresses)
        self.addCleanup(writers.stop)
        wait_until(lambda: len(writers.acked) > 200, 10, lambda: "no writes acknowledged")
        etcd = (f"--etcd={self.etcd.endpoint}", f"--group={self.group}")
        # Writes in flight on the primary throughout: some wait for their replica's
        # acknowledgement when the hold begins, and are answered after it (a regression: their
        # turn dropped the replicas' flows with the clients' connections, so the target could
        # not catch up).
        loadgen = subprocess.Popen(
            [LOADGEN, *etcd, "--duration=30", "--keys=1000", "--ratio=0:1", "--concurrency=20",
             "--progress=false"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(loadgen.kill)
        keys = sum(s.keys for s in self.stats(primary).shards)
        wait_until(lambda: sum(s.keys for s in self.stats(primary).shards) >= keys + 1000, 10,
                   lambda: f"the load generator's pre-load never landed: {loadgen.poll()}")
        time.sleep(0.2)
        # A target that is no replica of the primary is refused, and writes go on.
        rc, _, err, _ = self.cli(*etcd, "failover", "--to=127.0.0.1:1")
        self.assertEqual(rc, 3, err)
        self.assertIn("127.0.0.1:1 is no replica", err)
        target = others[0]
        full_syncs = {a: sum(f.full_syncs for f in self.stats(a).replication.flows)
                      for a in (primary, others[1])}
        started = time.monotonic()
        rc, out, err, _ = self.cli(*etcd, "failover", f"--to={target}")
        ended = time.monotonic()
        self.assertEqual(rc, 0, f"{err}\n{self.group_state()}")
        self.assertIn(f"primary: {target}, term {term + 1}", out)
        self.assertEqual(self.leader(), (term + 1, self.leader()[1], target))
        for other in (primary, others[1]):
            wait_until(lambda: self.following(other, target), 10,
                       lambda: f"{other} never followed {target}: {self.group_state()}")
        wait_until(lambda: writers.acks_after(ended, target), 5, lambda: "no writes after")
        writers.stop()
        loadgen.kill()
        loadgen.communicate()
        lost = writers.lost_on(target)
        self.assertEqual(lost[:10], [], f"{len(lost)} of {len(writers.acked)} writes lost")
        # The writes paused briefly: the longest gap between acknowledgements around it.
        times = sorted(t for _, _, t, _ in writers.acked.values())
        gap = max(b - a for a, b in zip(times, times[1:]) if b >= started and a <= ended)
        self.assertLess(gap, 1.0 * SLOW, f"writes paused {gap:.3f} s")
        # Nothing was copied: the old primary and the other replica went on from their
        # positions.
        for other in (primary, others[1]):
            flows = self.stats(other).replication.flows
            self.assertEqual(sum(f.full_syncs for f in flows), full_syncs[other],
                             f"{other}: {flows}")
        print(f"\nplanned failover: {len(writers.acked)} acknowledged writes, none lost; "
              f"writes paused {gap * 1000:.0f} ms ({out})", file=sys.stderr)

    def network(self, names):
        """A private bridge in this namespace (10.231.N.1) and a network namespace per name,
        each joined to the bridge by a veth pair (10.231.N.2, .3, ...); all removed at the
        end. {name: (namespace, its address, the veth end on the bridge)}, and the bridge's
        address."""
        tag = f"rk{os.getpid() % 10000}"
        net = f"10.231.{os.getpid() % 250}"

        def ip(*args, ns=None):
            subprocess.run([*(["ip", "netns", "exec", ns] if ns else []), "ip", *args],
                           check=True, capture_output=True, timeout=10)
        bridge = f"{tag}br"
        ip("link", "add", bridge, "type", "bridge")
        self.addCleanup(subprocess.run, ["ip", "link", "del", bridge], capture_output=True)
        ip("addr", "add", f"{net}.1/24", "dev", bridge)
        ip("link", "set", bridge, "up")
        out = {}
        for i, name in enumerate(names):
            ns, outside, inside = f"{tag}{name}", f"{tag}{name}h", f"{tag}{name}n"
            ip("netns", "add", ns)
            # After the servers in it stop (cleanups run last added, first).
            self.addCleanup(subprocess.run, ["ip", "netns", "del", ns], capture_output=True)
            ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            ip("link", "set", inside, "netns", ns)
            ip("link", "set", outside, "master", bridge, "up")
            ip("addr", "add", f"{net}.{i + 2}/24", "dev", inside, ns=ns)
            ip("link", "set", inside, "up", ns=ns)
            ip("link", "set", "lo", "up", ns=ns)
            out[name] = (ns, f"{net}.{i + 2}", outside)
        return out, f"{net}.1"

    def test_a_partitioned_primary_fences_itself(self):
        """A primary cut off from etcd and its replica by a real partition (its veth down),
        while a client beside it (in its namespace) keeps writing to it: it stops
        acknowledging before the replica takes over, and rejoins once the link is back; what
        it acknowledged alone (--min-replicas=0) is dropped, and counted."""
        self.partition(["b"], ())

    def test_a_partition_loses_no_acknowledged_write(self):
        """The same partition with three servers, --min-replicas=1 --acks=isr: the majority
        elects one of its two, and after healing every write the old primary acknowledged is
        on the new one."""
        self.partition(["b", "c"], ("--min-replicas=1", "--acks=isr"))

    def partition(self, others, flags):
        if shutil.which("ip") is None:
            self.skipTest("no `ip` (iproute2) to make network namespaces")
        work = tempfile.mkdtemp(prefix="ringkv-partition-test-")
        self.addCleanup(shutil.rmtree, work, True)
        nets, bridge = self.network(["a", *others])
        etcd = Etcd(work, host=bridge)
        etcd.start()
        self.addCleanup(etcd.kill)
        self.etcd = etcd

        def start(name):
            ns, host, _ = nets[name]
            server = RingkvServer(SERVER, "--threads=2", "--insecure", f"--etcd={etcd.endpoint}",
                                  f"--group={self.group}", f"--failover-timeout={TTL_S}s",
                                  *flags, *SERVER_FLAGS, host=host,
                                  prefix=("ip", "netns", "exec", ns))
            server.log = LogReader(server)
            self.servers[server.address] = server
            self.addCleanup(server.stop)
            return server
        a = start("a")
        wait_until(lambda: (self.leader() or (0, "", ""))[2] == a.address, 10,
                   lambda: "a was not elected")
        rest = [start(name) for name in others]
        for server in rest:
            wait_until(lambda: self.following(server.address, a.address), 10,
                       lambda: f"{server.address} never followed a")
        if "--acks=isr" in flags:
            wait_until(lambda: len(self.in_sync()) == len(rest), 10,
                       lambda: "the in-sync set never filled")
        # A writer beside a (in its namespace: put_loop.py, which times each answer as it
        # arrives, not as a process ends) and one here to each other server: each success
        # with its call's start and its answer's arrival.
        acks = {"a": [], "new": []}
        stop = threading.Event()
        writer = subprocess.Popen(
            ["ip", "netns", "exec", nets["a"][0], sys.executable,
             os.path.join(os.path.dirname(os.path.abspath(__file__)), "testing", "put_loop.py"),
             a.address, "a", python_stubs.generate(PROTO_DIR)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.addCleanup(writer.kill)

        def beside_a():
            for line in writer.stdout:
                key, began, arrived = line.split()
                acks["a"].append((key, float(began), float(arrived)))

        def to(server):
            with grpc.insecure_channel(server.address) as channel:
                kv = kv_pb2_grpc.KVStub(channel)
                n = 0
                while not stop.is_set():
                    n += 1
                    key, began = f"{server.address}-{n}", time.monotonic()
                    try:
                        kv.Put(kv_pb2.PutRequest(key=key.encode(), value=b"v"), timeout=1)
                    except grpc.RpcError:
                        time.sleep(0.01)
                        continue
                    acks["new"].append((key, began, time.monotonic()))
        threads = [threading.Thread(target=beside_a)]
        threads += [threading.Thread(target=to, args=(server,)) for server in rest]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: len(acks["a"]) >= 50, 10 * SLOW,
                       lambda: f"a acknowledged {len(acks['a'])} writes")
            subprocess.run(["ip", "link", "set", nets["a"][2], "down"], check=True)
            cut = time.monotonic()
            _, _, new = wait_until(
                lambda: (self.leader() or (0, "", ""))[2] in [s.address for s in rest]
                and self.leader(), TTL_S + 5, lambda: f"nobody took over: {self.group_state()}")
            wait_until(lambda: acks["new"], 10 * SLOW, lambda: f"{new} acknowledged nothing")
            time.sleep(0.5)
        finally:
            stop.set()
            writer.stdin.close()
            writer.wait(timeout=30)
            for t in threads:
                t.join()
        last_a = max(arrived for _, _, arrived in acks["a"])
        first_new = min(began for _, began, _ in acks["new"])
        # No overlap: a's last acknowledgement arrived before the new primary's first was even
        # asked for.
        self.assertLess(last_a, first_new, f"a acknowledged at {last_a - cut:.3f} s after the "
                        f"cut, {new} from {first_new - cut:.3f} s")
        self.assertLess(last_a - cut, TTL_S + 0.5 * SLOW, "a acknowledged past its lease")
        # The link back: a finds the new primary and rejoins as its replica. What a
        # acknowledged is all there with --min-replicas=1; with 0, what it acknowledged alone
        # after the cut is dropped, and counted.
        subprocess.run(["ip", "link", "set", nets["a"][2], "up"], check=True)
        wait_until(lambda: self.following(a.address, new), 15,
                   lambda: f"a never rejoined: {self.group_state()}")
        with grpc.insecure_channel(new) as channel:
            kv = kv_pb2_grpc.KVStub(channel)
            got = kv.MultiGet(kv_pb2.MultiGetRequest(keys=[k.encode() for k, _, _ in acks["a"]]),
                              timeout=10)
        lost = sum(1 for r in got.results if r.code != 0)
        flows = self.stats(a.address).replication.flows
        if "--min-replicas=1" in flags:
            self.assertEqual(lost, 0, f"{lost} of a's {len(acks['a'])} acknowledged writes lost")
        else:
            self.assertGreaterEqual(sum(f.dropped_keys for f in flows), lost, str(flows))
        print(f"\npartition ({len(rest) + 1} servers {' '.join(flags)}): a acknowledged its last "
              f"write {last_a - cut:.2f} s after the cut, the new primary its first "
              f"{min(t for _, _, t in acks['new']) - cut:.2f} s after; {lost} of a's "
              f"{len(acks['a'])} acknowledged writes not on the new primary",
              file=sys.stderr)

    def test_a_write_that_may_have_run_is_not_sent_again(self):
        a = self.start(free_port(), "--min-replicas=1", "--min-replicas-timeout=300ms")
        wait_until(lambda: (self.leader() or (0, "", ""))[2] == a.address, 10,
                   lambda: "the first server was not elected")
        b = self.start(free_port())
        wait_until(lambda: self.following(b.address, a.address), 10,
                   lambda: "the second server never followed the first")
        route = (f"--addr={a.address},{b.address}", "--failover-wait=5")
        self.assertEqual(self.cli(*route, "incr", "c")[:2], (0, "1"))
        # With its replica stopped, a runs the increment but cannot acknowledge it: sending it
        # again would run it again.
        sigstop(b.process.pid)
        try:
            rc, _, err, _ = self.cli(*route, "incr", "c")
        finally:
            os.kill(b.process.pid, signal.SIGCONT)
        self.assertEqual(rc, 3, err)
        self.assertIn("the write may have been applied, so it was not sent again", err)
        self.assertEqual(self.cli(f"--addr={a.address}", "get", "c")[:2], (0, "2"))
        wait_until(lambda: self.cli(f"--addr={b.address}", "get", "c")[1] == "2", 10,
                   lambda: "the replica never got the increment")
        # A read whose call met no answer is sent again (to the next address); a write is not.
        sigstop(a.process.pid)
        try:
            read = self.cli(*route, "--timeout=1", "get", "c")
            write = self.cli(*route, "--timeout=1", "incr", "c")
        finally:
            os.kill(a.process.pid, signal.SIGCONT)
        self.assertEqual(read[:2], (0, "2"), read[2])
        self.assertEqual(write[0], 3, write[2])
        self.assertIn(f"no answer from {a.address}", write[2])
        self.assertIn("may have been applied", write[2])

    def test_an_answer_held_past_the_fence_is_not_sent(self):
        a = self.start(free_port(), "--min-replicas=1", "--min-replicas-timeout=30s")
        wait_until(lambda: (self.leader() or (0, "", ""))[2] == a.address, 10,
                   lambda: "the first server was not elected")
        b = self.start(free_port())
        wait_until(lambda: self.following(b.address, a.address), 10,
                   lambda: "the second server never followed the first")
        # ... and a streams to it on both workers (the replica may say so first).
        wait_until(lambda: sum(f.state == "streaming"
                               for f in self.stats(a.address).replication.replicas) == 2, 10,
                   lambda: f"a never streamed to b: {self.stats(a.address).replication}")
        with grpc.insecure_channel(a.address) as channel:
            kv = kv_pb2_grpc.KVStub(channel)
            kv.Put(kv_pb2.PutRequest(key=b"before", value=b"1"), timeout=10)
            # The write waits for b's acknowledgement while a's lease runs out (etcd gone);
            # then b acknowledges: a ran the write before its deadline, but must not say so
            # after it.
            sigstop(b.process.pid)
            held = kv.Put.future(kv_pb2.PutRequest(key=b"held", value=b"2"), timeout=30)
            # ... and so does one in a Stream.
            put = kv_pb2.StreamOp(id=1, type=kv_pb2.OP_TYPE_PUT, key=b"held-streamed", value=b"2")
            streamed = kv.Stream(iter([kv_pb2.StreamRequest(ops=[put])]), timeout=30)
            time.sleep(0.2)
            self.assertFalse(held.done(), held.done() and (held.exception() or held.result()))
            self.etcd.kill()
            wait_until(lambda: self.stats(a.address).replication.group.fence_left_ms == 0,
                       TTL_S + 2, lambda: "a's fence never closed")
            os.kill(b.process.pid, signal.SIGCONT)
            with self.assertRaises(grpc.RpcError) as refused:
                held.result()
            # Its answer was made after the fence closed: not an acknowledgement.
            self.assertEqual(refused.exception.code(), grpc.StatusCode.UNAVAILABLE,
                             refused.exception.details())
            self.assertIn("lost the group's leadership before it could acknowledge it",
                          refused.exception.details())
            with self.assertRaises(grpc.RpcError) as ended:
                list(streamed)
            self.assertEqual(ended.exception.code(), grpc.StatusCode.UNAVAILABLE,
                             ended.exception.details())
            self.assertIn("the call's writes ran here, but this server lost the group's "
                          "leadership", ended.exception.details())
            # Writes are refused, saying why; reads go on.
            with self.assertRaises(grpc.RpcError) as later:
                kv.Put(kv_pb2.PutRequest(key=b"after", value=b"3"), timeout=10)
            self.assertIn("not the group's primary now", later.exception.details())
            # ... and ran nothing, which a Redirect detail tells a client; no primary is known.
            details = dict(later.exception.trailing_metadata()).get("grpc-status-details-bin")
            self.assertIsNotNone(details, "the fenced refusal carries no Redirect")
            status = kv_pb2.RpcStatus.FromString(details)
            redirects = [kv_pb2.Redirect.FromString(d.value) for d in status.details
                         if d.type_url == "type.googleapis.com/ringkv.v1.Redirect"]
            self.assertEqual([r.primary for r in redirects], [""])
            self.assertEqual(kv.Get(kv_pb2.GetRequest(key=b"before"), timeout=10).value, b"1")
            # ... but not linearizable reads, which need the primary within its lease; and a
            # consistency the server does not know is refused.
            for key in (b"before", b"absent"):
                with self.assertRaises(grpc.RpcError) as linearizable:
                    kv.Get(kv_pb2.GetRequest(key=key), timeout=10,
                           metadata=register_clients.CONSISTENCY)
                self.assertEqual(linearizable.exception.code(), grpc.StatusCode.UNAVAILABLE)
                self.assertIn("a linearizable read needs the group's primary",
                              linearizable.exception.details())
            # ... in a Stream too: its GET is refused, naming why, and a plain one is served.
            ops = [kv_pb2.StreamOp(id=1, type=kv_pb2.OP_TYPE_GET, key=b"before")]
            got = list(kv.Stream(iter([kv_pb2.StreamRequest(ops=ops)]), timeout=10,
                                 metadata=register_clients.CONSISTENCY))
            self.assertEqual([r.result.code for m in got for r in m.results],
                             [grpc.StatusCode.UNAVAILABLE.value[0]])
            self.assertIn("a linearizable read needs the group's primary",
                          got[0].results[0].result.message)
            got = list(kv.Stream(iter([kv_pb2.StreamRequest(ops=ops)]), timeout=10))
            self.assertEqual(got[0].results[0].result.value, b"1")
            with self.assertRaises(grpc.RpcError) as bad:
                kv.Get(kv_pb2.GetRequest(key=b"before"), timeout=10,
                       metadata=(("ringkv-consistency", "strong"),))
            self.assertEqual(bad.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("linearizable or serializable", bad.exception.details())

    def test_an_answer_held_back_by_the_client_does_not_leave_after_the_fence(self):
        if "--transport=grpc" in SERVER_FLAGS:
            self.skipTest("grpc++ keeps answers in buffers of its own, out of the server's reach")
        a = self.start(free_port())
        wait_until(lambda: (self.leader() or (0, "", ""))[2] == a.address, 10,
                   lambda: "the server was not elected")
        # A client that grants no flow-control window: the write runs and is answered OK, but
        # the answer's message, and the trailers behind it, wait in the server.
        call = h2_client.Call(a.address, "/ringkv.v1.KV/Put", window=0,
                              body=h2_client.grpc_message(h2_client.put_request(b"held", b"1")))
        self.addCleanup(call.close)
        self.assertIsNone(call.wait(1), call.trailers)
        self.assertEqual(call.headers.get(":status"), "200", "the write was never answered")
        self.assertEqual(call.data, b"")
        with grpc.insecure_channel(a.address) as channel:
            got = kv_pb2_grpc.KVStub(channel).Get(kv_pb2.GetRequest(key=b"held"), timeout=10)
        self.assertEqual(got.value, b"1")
        # etcd goes: a's fence closes at its deadline, with the answer still unsent.
        self.etcd.kill()
        wait_until(lambda: self.stats(a.address).replication.group.fence_left_ms == 0,
                   TTL_S + 2, lambda: "a's fence never closed")
        try:  # Now the client would take it ...
            call.conn.increment_flow_control_window(1 << 20, stream_id=call.stream)
            call.flush()
        except OSError:
            pass  # ... but the server has closed the connection.
        status = call.wait(3)
        self.assertIsNone(status, f"an acknowledgement left after the fence closed: "
                                  f"grpc-status {status}, message {call.data!r}")
        wait_until(lambda: any("holding answers that acknowledge writes" in line
                               for line in a.log.lines), 5,
                   lambda: "a never said it closed the connection: " + "".join(a.log.lines[-8:]))


if __name__ == "__main__":
    venv_main.run(TOOLS)
