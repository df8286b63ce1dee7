#!/usr/bin/env python3
"""Replication (issue 22) between real ringkv-servers on loopback.

- A replica (--replica-of) follows a primary under four writers (Put with and without TTLs,
  compare-and-set Puts, Deletes, Increments, Expire, Persist): once the writers stop and every
  flow is stable at the primary's position, both hold the same keys with the same values,
  versions and TTLs, after one full sync per flow; the replica expired nothing on its own;
  lag in bytes and ms is 0 and each worker counted its messages' delays; the primary lists
  both flows with the replica's address; a replica listening on 0.0.0.0 is listed at the
  address it connects from.
- A replica refuses every write (UNAVAILABLE, "read-only replica of" and the primary's address;
  nothing stored), in unary calls, MultiPut, Stream and through the CLI, and serves reads (Get,
  MultiGet, Scan, Stream GET). Stats give the roles.
- An expired key: the replica answers it as missing while the primary is stopped (SIGSTOP), yet
  keeps it; the primary's expiry reaches it as a delete once the primary runs again.
- A replica killed with SIGKILL, replaced by a new one after more writes: the new one full-syncs
  and holds what the primary holds; the primary drops the dead one's flows.
- The replica's connections cut (ss -K) three times under writes: each flow goes on from its
  position (partial resync, counted and logged), with no second full sync, and ends equal.
- --repl-backlog=64KiB and a replica stopped (SIGSTOP) while megabytes are written: it is cut
  off, full-syncs again, and ends equal; the primary's backlog stays bounded meanwhile.
- --min-replicas=1: a write is refused while no replica follows; each acknowledged write is
  on the replica at once; a stopped replica makes writes time out (UNAVAILABLE, yet run).
- A linearizable read of a write that waits for its stopped replica is answered only once the
  write is acknowledged; a plain read sees it at once. Past --min-replicas-timeout both fail,
  and so do linearizable reads until the replica has the write.
- The primary killed (SIGKILL) under --min-replicas=1 writers, the replica promoted with
  `ringkv replicate --stop`: no acknowledged write is missing, in five rounds.
- `ringkv replicate --to`: a replica switches primaries and holds the new one's data; a
  primary steps down (its data replaced, writes refused) and, promoted again, its old replica
  full-syncs from it.
- A replica switched to a primary killed (SIGKILL) mid full sync keeps exactly its old data.
- A primary that steps down to its caught-up replica, which is then promoted, goes on from its
  positions (no full sync); one that took writes the new primary never got full-syncs and
  counts the records and keys dropped (stats, log).
- Two replicas of a primary killed (SIGKILL); one promoted, the other re-pointed to it: one
  that stands behind resumes from its positions (records the promoted one kept as a replica,
  no full sync) and ends equal; one that stands ahead full-syncs and loses what the new
  primary never got.
- TLS to the primary (mTLS): a replica with the CA and a client certificate follows; one in
  plaintext or without a certificate syncs nothing and says why.
- A replica with --data-dir, killed (SIGKILL) and then stopped, restarted on its directory:
  each worker goes on from the position on its disk (partial resync, no full sync) and ends
  equal; promoted (also right after its full sync, before a snapshot holds the image), the
  writes it takes survive a SIGKILL with the data it had.
- A replica with --data-dir switched to another primary (under writes) and killed at a random
  moment of that full sync or soon after: restarted alone, it holds exactly the old primary's
  data, or the new one's with a prefix of its writes; never a mix.
- Bad setups: --threads unlike the primary's, a replica of itself, a port that is no ringkv
  server: each keeps retrying with a clear last_error and serves reads;
  --full-sync-keeps-data=false with --data-dir refuses the start (exit status 2).

Every wait polls with a deadline. Usage:
  replication_test.py SERVER_BINARY CLI_BINARY PROTO_DIR TOOLS_DIR LOADGEN_BINARY [SERVER_FLAG...]
RINGKV_SANITIZER (meson's b_sanitize) stretches the deadlines under a sanitizer. This script
re-runs itself under the venv's Python (grpcio).
"""
import os
import random
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "testing"))
import python_stubs  # noqa: E402
from ringkv_server import LogReader, RingkvServer, sigstop  # noqa: E402
import venv_main  # noqa: E402
from certs import make_certificates  # noqa: E402

SERVER, CLI, PROTO_DIR, TOOLS, LOADGEN = sys.argv[1:6] if len(sys.argv) >= 6 else (None,) * 5
SERVER_FLAGS = sys.argv[6:]
# ringkv-server with a persist::FaultEnv (server/testing/faults_main.cc).
FAULTS = os.environ.get("RINGKV_SERVER_FAULTS")
SLOW = 1 if os.environ.get("RINGKV_SANITIZER", "none") == "none" else 3  # Deadlines' factor.

CALL_TIMEOUT = 10  # Seconds, per RPC.
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 << 20)]
SOON_MS = 1500  # A key with less TTL left than this may expire mid-comparison: not compared.
TTL_SLACK_MS = 1000  # The remaining TTLs the two sides give for a key may differ by this.
BACKLOG = 64 << 10

# Imported by setUpModule, under the venv, once the stubs exist.
grpc = kv_pb2 = kv_pb2_grpc = text_format = None


def setUpModule():
    global grpc, kv_pb2, kv_pb2_grpc, text_format
    python_stubs.generate(PROTO_DIR)
    import grpc as grpc_module
    from google.protobuf import text_format as text_format_module
    from ringkv.v1 import kv_pb2 as pb, kv_pb2_grpc as pb_grpc
    grpc, kv_pb2, kv_pb2_grpc, text_format = grpc_module, pb, pb_grpc, text_format_module


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition, timeout, describe, poll=0.05):
    """Polls condition() every `poll` s until it is true (and returns it); AssertionError with
    describe() if it is still false after timeout * SLOW seconds."""
    deadline = time.time() + timeout * SLOW
    while True:
        got = condition()
        if got:
            return got
        if time.time() >= deadline:
            raise AssertionError(f"not so within {timeout * SLOW} s: {describe()}")
        time.sleep(poll)


# The calls the tests make, on a KVStub.

def get(kv, key):
    """The GetResponse, or None if the key is absent."""
    try:
        return kv.Get(kv_pb2.GetRequest(key=key), timeout=CALL_TIMEOUT)
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.NOT_FOUND:
            return None
        raise


def put_many(kv, items):
    """MultiPuts (key, value, ttl_ms) items, 100 a call; each must succeed."""
    for i in range(0, len(items), 100):
        batch = [kv_pb2.KeyValue(key=k, value=v, ttl_ms=t) for k, v, t in items[i:i + 100]]
        results = kv.MultiPut(kv_pb2.MultiPutRequest(items=batch), timeout=CALL_TIMEOUT).results
        bad = [(item.key, r.code, r.message) for item, r in zip(batch, results) if r.code != 0]
        assert not bad, f"MultiPut failed: {bad[:5]}"


def stats(kv):
    return kv.Stats(kv_pb2.StatsRequest(), timeout=CALL_TIMEOUT)


def flows(kv):
    """The server's replication flows, by worker."""
    return {f.worker: f for f in stats(kv).replication.flows}


def show(kv):
    """The server's replication stats on one line, for failure messages."""
    try:
        return text_format.MessageToString(stats(kv).replication, as_one_line=True)
    except grpc.RpcError as e:
        return f"(Stats failed: {e.code()} {e.details()})"


def caught_up(primary, replica):
    """Whether each of the replica's flows is stable, without lag, at the position of the
    primary's flow of that worker, and the primary did not move while this looked."""
    before = {w: f.lsn for w, f in flows(primary).items()}
    mine = flows(replica)
    after = {w: f.lsn for w, f in flows(primary).items()}
    return (before == after and len(mine) == len(before) > 0 and
            all(f.state == "stable" and f.lag_records == 0 and f.applied_lsn == before.get(w)
                for w, f in mine.items()))


def scan_keys(kv):
    """Every key, paging with the cursor."""
    found, cursor = set(), 0
    for _ in range(100000):
        page = kv.Scan(kv_pb2.ScanRequest(cursor=cursor, limit=1000), timeout=CALL_TIMEOUT)
        found.update(page.keys)
        cursor = page.cursor
        if cursor == 0:
            return found
    raise AssertionError("Scan never gave cursor 0")


def read(kv, keys):
    """key -> (value, version, ttl_ms) for the keys present, with one MultiGet."""
    results = kv.MultiGet(kv_pb2.MultiGetRequest(keys=keys), timeout=CALL_TIMEOUT).results
    assert len(results) == len(keys), (len(results), len(keys))
    out = {}
    for key, r in zip(keys, results):
        assert r.code in (0, 5), f"MultiGet of {key!r}: code {r.code} {r.message}"
        if r.code == 0:
            out[key] = (r.value, r.version, r.ttl_ms)
    return out


def brief(entry):
    if entry is None:
        return "absent"
    value, version, ttl_ms = entry
    return f"version {version}, ttl_ms {ttl_ms}, {len(value)} bytes {value[:16]!r}"


def run_writers(address, seconds, writers=4, keys=2000):
    """`writers` threads, each on its own channel, write a random mix for `seconds`: Put (some
    with a TTL of 200 ms to 2 s), compare-and-set Put on the version a Get gave, Delete,
    Increment of counter keys, Expire, Persist. Returns (calls made, unexpected errors):
    NOT_FOUND and FAILED_PRECONDITION are expected."""
    stop_at = time.time() + seconds
    counts, errors = [0] * writers, []

    def value(rng):
        roll = rng.random()
        size = (20000 if roll < 0.02 else rng.randint(1000, 3000) if roll < 0.12
                else rng.randint(1, 200))
        return rng.randbytes(size)

    def write(n):
        rng = random.Random(n)
        expected = (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION)
        try:
            with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
                kv = kv_pb2_grpc.KVStub(channel)
                while time.time() < stop_at:
                    key = b"k%04d" % rng.randrange(keys)
                    roll = rng.random()
                    try:
                        if roll < 0.35:
                            kv.Put(kv_pb2.PutRequest(key=key, value=value(rng)),
                                   timeout=CALL_TIMEOUT)
                        elif roll < 0.50:
                            kv.Put(kv_pb2.PutRequest(key=key, value=value(rng),
                                                     ttl_ms=rng.randint(200, 2000)),
                                   timeout=CALL_TIMEOUT)
                        elif roll < 0.65:
                            current = get(kv, key)
                            version = current.version if current is not None else 0
                            kv.Put(kv_pb2.PutRequest(key=key, value=value(rng),
                                                     condition=kv_pb2.Condition(version=version)),
                                   timeout=CALL_TIMEOUT)
                        elif roll < 0.75:
                            kv.Delete(kv_pb2.DeleteRequest(key=key), timeout=CALL_TIMEOUT)
                        elif roll < 0.87:
                            kv.Increment(kv_pb2.IncrementRequest(
                                key=b"counter%02d" % rng.randrange(20),
                                delta=rng.randint(-3, 10)), timeout=CALL_TIMEOUT)
                        elif roll < 0.94:
                            kv.Expire(kv_pb2.ExpireRequest(key=key,
                                                           ttl_ms=rng.randint(200, 2000)),
                                      timeout=CALL_TIMEOUT)
                        else:
                            kv.Persist(kv_pb2.PersistRequest(key=key), timeout=CALL_TIMEOUT)
                    except grpc.RpcError as e:
                        if e.code() not in expected:
                            errors.append(f"{e.code()}: {e.details()}")
                    counts[n] += 1
        except Exception as e:  # noqa: BLE001 -- reported by the test, not lost in a thread.
            errors.append(repr(e))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 60)
    assert not any(t.is_alive() for t in threads), "a writer hung"
    return sum(counts), errors


class ClosingListener:
    """A TCP port that accepts connections and closes them at once: no ringkv server."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self):
        self.done.set()
        self.thread.join(timeout=5)
        self.sock.close()


class ReplicationTest(unittest.TestCase):
    # Servers: each test starts its own, and its cleanups stop them.

    def start(self, *flags, threads=2, binary=None):
        """A server, stopped (SIGTERM, exit status 0) when the test ends; one that a test
        killed is only reaped, and one that died on its own fails the test."""
        started_ms = int(time.time() * 1000)
        server = RingkvServer(binary or SERVER, f"--threads={threads}", *flags, *SERVER_FLAGS)
        server.started_ms = started_ms
        server.log = LogReader(server)
        server.killed = False

        def cleanup():
            if server.process.poll() is None:
                server.process.send_signal(signal.SIGCONT)  # In case a test left it stopped.
                server.stop()
                return
            status = server.process.wait()
            server.process.stderr.close()
            if not server.killed:
                raise AssertionError(f"ringkv-server {flags} exited {status} on its own: "
                                     + "".join(server.log.lines[-20:]))
        self.addCleanup(cleanup)
        return server

    def replica_of(self, primary, *flags, threads=2, binary=None):
        return self.start(f"--replica-of={primary.address}", *flags, threads=threads,
                          binary=binary)

    def kv(self, server, fresh=False):
        """A stub on a channel to the server. fresh: on a connection of its own (grpcio shares
        one per address between channels), for a server that restarted on the same port or
        whose connections were cut."""
        options = CHANNEL_OPTIONS + ([("grpc.use_local_subchannel_pool", 1)] if fresh else [])
        channel = grpc.insecure_channel(server.address, options=options)
        self.addCleanup(channel.close)
        return kv_pb2_grpc.KVStub(channel)

    def kill9(self, server):
        server.killed = True
        server.process.kill()
        server.process.wait(timeout=10)

    def pause(self, server):
        """SIGSTOP (once every thread has stopped); a cleanup sends SIGCONT, so that the stop at
        the end finds it running."""
        sigstop(server.process.pid)
        self.addCleanup(self.resume, server)

    def resume(self, server):
        if server.process.poll() is None:
            os.kill(server.process.pid, signal.SIGCONT)

    # Checks.

    def wait_stable(self, primary_kv, replica_kv, replica, timeout=20, extra=None):
        """Waits until the replica is caught up (caught_up) and, if given, extra() holds."""
        wait_until(lambda: caught_up(primary_kv, replica_kv) and (extra is None or extra()),
                   timeout,
                   lambda: (f"\nprimary: {show(primary_kv)}\nreplica: {show(replica_kv)}\n"
                            f"replica's log: {''.join(replica.log.lines[-20:])}"))

    def compare(self, primary_kv, replica_kv, at_least):
        """Every key either side lists, unless it has less than SOON_MS of TTL left: present
        on both, with the same value and version, and a TTL on both or neither (the remaining
        times within TTL_SLACK_MS). Each batch is read from both sides at once, so that the
        remaining TTLs are comparable."""
        keys = sorted(scan_keys(primary_kv) | scan_keys(replica_kv))
        compared, problems = 0, []
        for i in range(0, len(keys), 100):
            batch = keys[i:i + 100]
            mine, theirs = read(primary_kv, batch), read(replica_kv, batch)
            for key in batch:
                p, r = mine.get(key), theirs.get(key)
                if p is None and r is None:
                    continue  # Expired between the scan and the read.
                if any(e is not None and 0 <= e[2] <= SOON_MS for e in (p, r)):
                    continue  # About to expire: may be gone from one side by now.
                if (p is None or r is None or p[:2] != r[:2] or (p[2] < 0) != (r[2] < 0)
                        or abs(p[2] - r[2]) > TTL_SLACK_MS):
                    problems.append(f"{key!r}: primary {brief(p)}; replica {brief(r)}")
                else:
                    compared += 1
        self.assertEqual(problems[:20], [], f"{len(problems)} of {len(keys)} keys differ")
        self.assertGreaterEqual(compared, at_least, f"of {len(keys)} keys listed")
        return compared

    def assertRefused(self, call, primary):
        """The call fails with UNAVAILABLE, naming the server a read-only replica of primary,
        with a Redirect to primary in grpc-status-details-bin (a google.rpc.Status)."""
        with self.assertRaises(grpc.RpcError) as raised:
            call()
        e = raised.exception
        self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE, e.details())
        self.assertIn("read-only replica of", e.details())
        self.assertIn(primary, e.details())
        details = dict(e.trailing_metadata() or ()).get("grpc-status-details-bin")
        self.assertIsNotNone(details, f"no grpc-status-details-bin in {e.trailing_metadata()}")
        status = kv_pb2.RpcStatus.FromString(details)
        self.assertEqual((status.code, status.message), (14, e.details()))
        self.assertEqual([d.type_url for d in status.details],
                         ["type.googleapis.com/ringkv.v1.Redirect"])
        self.assertEqual(kv_pb2.Redirect.FromString(status.details[0].value).primary, primary)

    def primary_and_replica(self, keys):
        """A primary holding `keys` keys (a000...), and a replica caught up with it: (primary,
        its stub, replica, its stub)."""
        a = self.start()
        akv = self.kv(a)
        put_many(akv, [(b"a%03d" % i, b"a", 0) for i in range(keys)])
        r = self.replica_of(a)
        rkv = self.kv(r)
        self.wait_stable(akv, rkv, r)
        return a, akv, r, rkv

    def cli(self, server, *args):
        return subprocess.run([CLI, f"--addr={server.address}", *args], capture_output=True,
                              text=True, timeout=30)

    # The tests.

    def test_follows_writes(self):
        primary = self.start()
        pkv = self.kv(primary)
        # Keys the writers never touch, there before the replica: its full sync's image brings
        # them. One in five has a TTL that outlives the test.
        put_many(pkv, [(b"base%04d" % i, b"base-%d" % i, 60000 if i % 5 == 0 else 0)
                       for i in range(600)])
        replica = self.replica_of(primary)
        rkv = self.kv(replica)
        # The writers start at once: some of their writes come during the full sync.
        calls, errors = run_writers(primary.address, seconds=3)
        self.assertEqual(errors[:10], [], f"{len(errors)} unexpected errors")
        self.assertGreater(calls, 100)
        self.wait_stable(pkv, rkv, replica)
        self.compare(pkv, rkv, at_least=600)
        self.assertEqual({w: f.full_syncs for w, f in flows(rkv).items()}, {0: 1, 1: 1},
                         show(rkv))
        # The primary lists the replica's flows, one per worker, where it listens, and (once its
        # next acknowledgement comes, within 100 ms) without lag.
        wait_until(lambda: sorted((f.address, f.worker, f.state, f.lag_records)
                                  for f in stats(pkv).replication.replicas)
                   == [(replica.address, 0, "streaming", 0), (replica.address, 1, "streaming", 0)],
                   10, lambda: show(pkv))
        # Lag in time and bytes: none once caught up (the primary's expiries keep streaming
        # deletes, so a moment without any is waited for); each worker counted the delays of the
        # messages it applied (the writers made some on each), within the histogram's bounds.
        wait_until(lambda: all((f.lag_records, f.lag_bytes, f.lag_ms) == (0, 0, 0.0)
                               for f in flows(rkv).values()), 10, lambda: show(rkv))
        r = stats(rkv).replication
        self.assertEqual(len(r.delay_bounds_ms), 13, show(rkv))
        for f in r.flows:
            self.assertEqual(len(f.delay_buckets), len(r.delay_bounds_ms) + 1, show(rkv))
            self.assertGreater(sum(f.delay_buckets), 0, show(rkv))
            self.assertGreater(f.delay_sum_ms, 0, show(rkv))
        # Expiry is the primary's: the replica removed no key because its TTL passed.
        self.assertEqual(sum(s.expired for s in stats(rkv).shards), 0)

    def test_refuses_writes(self):
        primary = self.start()
        replica = self.replica_of(primary)
        pkv, rkv = self.kv(primary), self.kv(replica)
        pkv.Put(kv_pb2.PutRequest(key=b"there", value=b"1"), timeout=CALL_TIMEOUT)
        self.wait_stable(pkv, rkv, replica)
        # The roles, in Stats.
        mine, theirs = stats(pkv).replication, stats(rkv).replication
        self.assertEqual((mine.role, mine.primary), ("primary", ""))
        self.assertEqual((theirs.role, theirs.primary), ("replica", primary.address))
        self.assertEqual(len(theirs.flows), 2)
        self.assertEqual([f.replicas for f in mine.flows], [1, 1])

        p = primary.address
        refused = {
            "Put": lambda: rkv.Put(kv_pb2.PutRequest(key=b"w", value=b"v"), timeout=CALL_TIMEOUT),
            "Put with a condition": lambda: rkv.Put(
                kv_pb2.PutRequest(key=b"w", value=b"v", condition=kv_pb2.Condition(absent=True)),
                timeout=CALL_TIMEOUT),
            "Delete": lambda: rkv.Delete(kv_pb2.DeleteRequest(key=b"there"), timeout=CALL_TIMEOUT),
            "Increment": lambda: rkv.Increment(kv_pb2.IncrementRequest(key=b"n", delta=1),
                                               timeout=CALL_TIMEOUT),
            "Expire": lambda: rkv.Expire(kv_pb2.ExpireRequest(key=b"there", ttl_ms=1000),
                                         timeout=CALL_TIMEOUT),
            "Persist": lambda: rkv.Persist(kv_pb2.PersistRequest(key=b"there"),
                                           timeout=CALL_TIMEOUT),
        }
        for name, call in refused.items():
            with self.subTest(name):
                self.assertRefused(call, p)
        # MultiPut: the whole call refused, or else each item.
        items = [kv_pb2.KeyValue(key=b"m1", value=b"v"), kv_pb2.KeyValue(key=b"m2", value=b"v")]
        try:
            results = rkv.MultiPut(kv_pb2.MultiPutRequest(items=items),
                                   timeout=CALL_TIMEOUT).results
        except grpc.RpcError as e:
            self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE, e.details())
            self.assertIn("read-only replica of " + p, e.details())
        else:
            for r in results:
                self.assertEqual(r.code, grpc.StatusCode.UNAVAILABLE.value[0], r.message)
                self.assertIn("read-only replica of " + p, r.message)
        # Stream: each write refused on its own; its GET served.
        ops = kv_pb2.StreamRequest(ops=[
            kv_pb2.StreamOp(id=1, type=kv_pb2.OP_TYPE_GET, key=b"there"),
            kv_pb2.StreamOp(id=2, type=kv_pb2.OP_TYPE_PUT, key=b"s", value=b"v"),
            kv_pb2.StreamOp(id=3, type=kv_pb2.OP_TYPE_DELETE, key=b"there")])
        results = {}
        for response in rkv.Stream(iter([ops]), timeout=CALL_TIMEOUT):
            for r in response.results:
                results[r.id] = r.result
        self.assertEqual((results[1].code, results[1].value), (0, b"1"))
        for i in (2, 3):
            self.assertEqual(results[i].code, grpc.StatusCode.UNAVAILABLE.value[0])
            self.assertIn("read-only replica of " + p, results[i].message)
            self.assertEqual(results[i].redirect.primary, p)
        self.assertFalse(results[1].HasField("redirect"))
        # The CLI: reads work; a write follows the replica's Redirect to the primary.
        r = self.cli(replica, "get", "there")
        self.assertEqual((r.returncode, r.stdout), (0, "1"), r.stderr)
        r = self.cli(replica, "put", "c", "v")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(get(pkv, b"c").value, b"v")
        r = self.cli(replica, "del", "c")
        self.assertEqual(r.returncode, 0, r.stderr)

        # Nothing was stored or changed, on either side.
        self.wait_stable(pkv, rkv, replica)
        for kv in (pkv, rkv):
            for key in (b"w", b"n", b"m1", b"m2", b"s", b"c"):
                self.assertIsNone(get(kv, key), key)
            there = get(kv, b"there")
            self.assertEqual((there.value, there.ttl_ms), (b"1", -1))
        # Reads on the replica: Get, MultiGet, Scan.
        self.assertEqual(get(rkv, b"there").version, get(pkv, b"there").version)
        self.assertEqual(list(read(rkv, [b"there", b"w"])), [b"there"])
        self.assertEqual(scan_keys(rkv), {b"there"})
        # The load generator: its pre-load is redirected, and its run goes to the primary.
        r = subprocess.run([LOADGEN, f"--addr={replica.address}", "--keys=50", "--ops=200",
                            "--concurrency=1", "--progress=false", "--ratio=0:1"],
                           capture_output=True, text=True, timeout=60 * SLOW)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("running against its primary " + p, r.stderr)
        self.assertEqual(len(scan_keys(pkv) - {b"there"}), 50)

    def test_expiry_comes_from_the_primary(self):
        primary = self.start()
        replica = self.replica_of(primary)
        pkv, rkv = self.kv(primary), self.kv(replica)
        put_many(pkv, [(b"stays%d" % i, b"v", 0) for i in range(10)])
        pkv.Put(kv_pb2.PutRequest(key=b"short", value=b"v", ttl_ms=2500), timeout=CALL_TIMEOUT)
        self.wait_stable(pkv, rkv, replica)
        keys = lambda: sum(s.keys for s in stats(rkv).shards)  # noqa: E731
        # With the primary stopped, no delete can come: the replica hides the key when its
        # time is up, and keeps it.
        self.pause(primary)
        self.assertEqual(keys(), 11, "the key expired before the primary was stopped")
        wait_until(lambda: get(rkv, b"short") is None, 10,
                   lambda: f"the replica still answers {get(rkv, b'short')}")
        self.assertEqual(read(rkv, [b"short", b"stays0"]).keys(), {b"stays0"})
        self.assertNotIn(b"short", scan_keys(rkv))
        replica_stats = stats(rkv)
        self.assertEqual(sum(s.keys for s in replica_stats.shards), 11)
        self.assertEqual(sum(s.expired for s in replica_stats.shards), 0)
        # The primary expires it (a Get of it too, if it expires lazily) and the delete comes.
        self.resume(primary)
        self.assertIsNone(get(pkv, b"short"))
        wait_until(lambda: keys() == 10, 10, lambda: f"replica keys {keys()}: {show(rkv)}")
        self.wait_stable(pkv, rkv, replica)
        self.compare(pkv, rkv, at_least=10)
        self.assertEqual(sum(s.expired for s in stats(rkv).shards), 0)

    def test_restart_full_syncs(self):
        primary = self.start()
        pkv = self.kv(primary)
        put_many(pkv, [(b"a%04d" % i, b"first-%d" % i, 0) for i in range(500)])
        replica = self.replica_of(primary)
        rkv = self.kv(replica)
        self.wait_stable(pkv, rkv, replica)
        self.compare(pkv, rkv, at_least=500)
        self.kill9(replica)
        # The primary drops a dead replica from its list.
        wait_until(lambda: len(stats(pkv).replication.replicas) == 0, 10, lambda: show(pkv))
        # More writes while no replica follows: new keys, overwrites, deletes.
        put_many(pkv, [(b"b%04d" % i, b"second-%d" % i, 0) for i in range(500)])
        put_many(pkv, [(b"a%04d" % i, b"again-%d" % i, 60000) for i in range(100)])
        for i in range(100, 200):
            pkv.Delete(kv_pb2.DeleteRequest(key=b"a%04d" % i), timeout=CALL_TIMEOUT)
        again = self.replica_of(primary)  # A new process on a new port.
        akv = self.kv(again)
        # The primary has dropped the dead replica's flows: one replica per worker.
        self.wait_stable(pkv, akv, again,
                         extra=lambda: all(f.replicas == 1 for f in flows(pkv).values()))
        self.assertEqual(self.compare(pkv, akv, at_least=900), 900)
        self.assertEqual({w: f.full_syncs for w, f in flows(akv).items()}, {0: 1, 1: 1})
        self.assertEqual({f.address for f in stats(pkv).replication.replicas}, {again.address})

    def test_partial_resync_after_a_broken_connection(self):
        # The replica's connections to the primary are cut (ss -K: the kernel aborts the
        # sockets) while writes go on: each flow asks to go on from its position, and the
        # primary, whose backlog still holds it, sends only what was missed.
        if shutil.which("ss") is None:
            self.skipTest("no ss (iproute2) to cut the connections with")
        primary = self.start()
        pkv = self.kv(primary)
        put_many(pkv, [(b"p%04d" % i, b"before-%d" % i, 0) for i in range(1000)])
        replica = self.replica_of(primary)
        rkv = self.kv(replica)
        self.wait_stable(pkv, rkv, replica)
        port = primary.address.rsplit(":", 1)[1]
        for round in range(3):
            cut = subprocess.run(["ss", "-K", "dst", "127.0.0.1", "dport", "=", f":{port}"],
                                 capture_output=True, text=True)
            self.assertEqual(cut.returncode, 0, cut.stderr)
            pkv = self.kv(primary, fresh=True)  # The test's own connections were cut too.
            put_many(pkv, [(b"p%04d" % i, b"round-%d" % round, 0) for i in range(500)])
            for i in range(900 + 30 * round, 930 + 30 * round):
                pkv.Delete(kv_pb2.DeleteRequest(key=b"p%04d" % i), timeout=CALL_TIMEOUT)
            self.wait_stable(pkv, rkv, replica, extra=lambda: all(
                f.partial_syncs >= round + 1 for f in flows(rkv).values()))
        self.assertEqual({w: f.full_syncs for w, f in flows(rkv).items()}, {0: 1, 1: 1})
        self.assertEqual(self.compare(pkv, rkv, at_least=910), 910)
        self.assertTrue(any("partial resync" in line for line in replica.log.lines),
                        "".join(replica.log.lines[-20:]))

    def test_backlog_overflow_full_syncs(self):
        primary = self.start(f"--repl-backlog={BACKLOG >> 10}KiB")
        pkv = self.kv(primary)
        self.assertEqual(stats(pkv).replication.backlog_limit_bytes, BACKLOG)
        put_many(pkv, [(b"small%03d" % i, b"v", 0) for i in range(100)])
        replica = self.replica_of(primary)
        rkv = self.kv(replica)
        self.wait_stable(pkv, rkv, replica)
        self.assertEqual({w: f.full_syncs for w, f in flows(rkv).items()}, {0: 1, 1: 1})
        # 40 MB while the replica reads nothing: 300 times each worker's backlog, and more
        # than what is in transit can hold (the primary's send buffer, 256 KiB, the socket
        # buffers of both ends, a few MB each on loopback, and the replica's HTTP/2 window).
        # The primary goes on serving writes.
        self.pause(replica)
        big = [(b"big%05d" % i, (b"%05d" % i) * 20000, 0) for i in range(400)]
        for i in range(0, len(big), 20):
            put_many(pkv, big[i:i + 20])
        # The backlog keeps its limit, or its newest turn's records if they alone pass it
        # (one MultiPut here: at most 2 MB).
        for w, f in flows(pkv).items():
            self.assertLessEqual(f.backlog_bytes, BACKLOG + 20 * 100_000, f"worker {w}: {show(pkv)}")
            self.assertGreater(f.backlog_first_lsn, 0, f"worker {w}: {show(pkv)}")
        self.resume(replica)
        # Cut off, each flow full-syncs again (3 in all at least, on top of the first 2).
        self.wait_stable(pkv, rkv, replica, timeout=30,
                         extra=lambda: sum(f.full_syncs for f in flows(rkv).values()) >= 3)
        self.compare(pkv, rkv, at_least=500)

    def test_primary_with_a_data_dir_snapshots_and_restarts(self):
        # The data directory's snapshots and the replicas' full syncs share each worker's one
        # snapshot; a primary restarted from its disk on the same port is followed again.
        data = tempfile.mkdtemp(prefix="ringkv-replication-")
        self.addCleanup(shutil.rmtree, data, True)
        port = free_port()
        flags = (f"--listen=127.0.0.1:{port}", f"--data-dir={os.path.join(data, 'data')}")
        primary = self.start(*flags)
        pkv = self.kv(primary)
        put_many(pkv, [(b"d%05d" % i, b"x" * (i % 500), 0) for i in range(3000)])
        replica = self.replica_of(primary)
        rkv = self.kv(replica)
        snapshot = pkv.Snapshot(kv_pb2.SnapshotRequest(), timeout=CALL_TIMEOUT * SLOW)
        self.assertEqual(snapshot.keys, 3000)
        put_many(pkv, [(b"e%05d" % i, b"y", 0) for i in range(500)])
        self.wait_stable(pkv, rkv, replica)
        self.compare(pkv, rkv, at_least=3500)
        primary.stop()
        primary.killed = True  # Stopped here, not by the cleanup.
        again = self.start(*flags)  # Restored from its snapshot, on the same port.
        akv = self.kv(again, fresh=True)
        put_many(akv, [(b"f%05d" % i, b"z", 0) for i in range(10)])
        self.wait_stable(akv, rkv, replica,
                         extra=lambda: sum(f.full_syncs for f in flows(rkv).values()) >= 4)
        self.assertEqual(self.compare(akv, rkv, at_least=3510), 3510)

    def data_dir(self):
        data = tempfile.mkdtemp(prefix="ringkv-replication-")
        self.addCleanup(shutil.rmtree, data, True)
        return f"--data-dir={os.path.join(data, 'data')}"

    def wait_snapshot(self, kv, after_ms=0):
        """Waits until a snapshot begun after after_ms has committed on that server."""
        wait_until(lambda: stats(kv).persistence.snapshot_unix_ms > after_ms, 20 * SLOW,
                   lambda: str(stats(kv).persistence))

    def contents(self, kv):
        """key -> (value, version), every key the server holds."""
        keys = sorted(scan_keys(kv))
        out = {}
        for i in range(0, len(keys), 100):
            out.update({k: e[:2] for k, e in read(kv, keys[i:i + 100]).items()})
        return out

    def test_replica_with_a_data_dir_goes_on_from_its_disk(self):
        # A replica with --data-dir logs what it applies with its positions: killed (SIGKILL)
        # or stopped, then restarted on its directory, each worker goes on from its position
        # (a partial resync, no full sync) and ends equal to the primary. Promoted, the writes
        # it takes survive a SIGKILL too.
        primary = self.start()
        pkv = self.kv(primary)
        put_many(pkv, [(b"a%04d" % i, b"first-%d" % i, 0) for i in range(1000)])
        flags = (f"--listen=127.0.0.1:{free_port()}", self.data_dir())
        replica = self.replica_of(primary, *flags)
        rkv = self.kv(replica)
        self.wait_stable(pkv, rkv, replica)
        # The full sync's image is on disk once the snapshot it asks for has committed.
        self.wait_snapshot(rkv, replica.started_ms)
        put_many(pkv, [(b"b%04d" % i, b"second-%d" % i, 60000) for i in range(300)])
        self.wait_stable(pkv, rkv, replica)
        for how in ("kill", "stop"):
            if how == "kill":
                self.kill9(replica)
            else:
                replica.stop()
                replica.killed = True  # Stopped here, not by the cleanup.
            # More writes while it is away: new keys, overwrites with TTLs, deletes.
            put_many(pkv, [(b"c%s%04d" % (how.encode(), i), b"third", 0) for i in range(300)])
            put_many(pkv, [(b"a%04d" % i, b"again-%s" % how.encode(), 60000)
                           for i in range(100)])
            for i in range(100, 150) if how == "kill" else range(150, 200):
                pkv.Delete(kv_pb2.DeleteRequest(key=b"a%04d" % i), timeout=CALL_TIMEOUT)
            replica = self.replica_of(primary, *flags)
            rkv = self.kv(replica, fresh=True)
            self.wait_stable(pkv, rkv, replica)
            got = flows(rkv)
            self.assertEqual({w: (f.full_syncs, f.partial_syncs) for w, f in got.items()},
                             {0: (0, 1), 1: (0, 1)}, f"after a {how}: {show(rkv)}")
            self.compare(pkv, rkv, at_least=1500)
        promoted = self.cli(replica, "replicate", "--stop")
        self.assertEqual(promoted.returncode, 0, promoted.stderr)
        put_many(rkv, [(b"d%04d" % i, b"fourth", 0) for i in range(200)])
        expected = self.contents(rkv)
        self.kill9(replica)
        again = self.start(*flags)
        self.assertEqual(self.contents(self.kv(again, fresh=True)), expected)

    def test_replica_with_a_data_dir_promoted_right_after_its_full_sync(self):
        # Promoted as soon as its full sync is applied: the promotion waits until a snapshot
        # holds the image, so that the writes it then takes, logged after the image, are
        # restored with it after a SIGKILL.
        primary = self.start()
        pkv = self.kv(primary)
        put_many(pkv, [(b"a%05d" % i, b"x" * (i % 90), 0) for i in range(20000)])
        flags = (f"--listen=127.0.0.1:{free_port()}", self.data_dir())
        replica = self.replica_of(primary, *flags)
        rkv = self.kv(replica)
        self.wait_stable(pkv, rkv, replica)
        promoted = self.cli(replica, "replicate", "--stop")
        self.assertEqual(promoted.returncode, 0, promoted.stderr)
        put_many(rkv, [(b"p%03d" % i, b"after", 0) for i in range(100)])
        expected = self.contents(rkv)
        self.assertEqual(len(expected), 20100)
        self.kill9(replica)
        again = self.start(*flags)
        self.assertEqual(self.contents(self.kv(again, fresh=True)), expected)

    def test_replica_with_a_data_dir_killed_before_its_full_sync_is_on_disk(self):
        # The same, at the worst moment: the replica (ringkv-server-faults) kills itself when
        # the snapshot its full sync asked for has its files written and renamed but no
        # MANIFEST names them yet, while the new primary's writes are logged after the image.
        # Restarted alone, it holds exactly the old primary's data.
        a, b = self.start(threads=1), self.start(threads=1)
        akv, bkv = self.kv(a), self.kv(b)
        put_many(akv, [(b"a%05d" % i, b"A" * (i % 50), 0) for i in range(3000)])
        put_many(bkv, [(b"b%05d" % i, b"B" * (i % 70), 0) for i in range(20000)])
        a_data = self.contents(akv)
        stop = self.start_writer(bkv)
        flags = (f"--listen=127.0.0.1:{free_port()}", self.data_dir())
        replica = self.replica_of(a, *flags, threads=1)
        rkv = self.kv(replica)
        self.wait_stable(akv, rkv, replica)
        replica.stop()  # Its snapshot at exit holds A's data.
        replica.killed = True
        doomed = self.replica_of(b, *flags, "--fault-crash-in-snapshot=renamed", threads=1,
                                 binary=FAULTS)
        doomed.killed = True
        doomed.process.wait(timeout=30 * SLOW)
        self.assertEqual(doomed.process.returncode, -signal.SIGKILL)
        stop.set()
        alone = self.start(*flags, threads=1)
        got = self.contents(self.kv(alone, fresh=True))
        self.assertEqual(got == a_data, True,
                         f"{len(got)} keys: {sum(k.startswith(b'a') for k in got)} of A's, "
                         f"{sum(k.startswith(b'b') for k in got)} of B's, "
                         f"{sum(k.startswith(b'w') for k in got)} written to B")

    def start_writer(self, kv):
        """A thread setting w0000000, w0000001, ... one after another until the event it
        returns is set (a cleanup sets it and joins the thread)."""
        stop, written = threading.Event(), [0]

        def write():
            while not stop.is_set():
                kv.Put(kv_pb2.PutRequest(key=b"w%07d" % written[0], value=b"w"),
                       timeout=CALL_TIMEOUT)
                written[0] += 1
        writer = threading.Thread(target=write)
        writer.start()
        self.addCleanup(writer.join)
        self.addCleanup(stop.set)
        return stop

    def test_replica_with_a_data_dir_killed_around_a_full_sync(self):
        # A replica with --data-dir switched from primary A (static) to B (static keys, and a
        # writer setting w-keys one after another) and killed (SIGKILL) at a random moment of
        # that full sync or soon after: restarted alone, it holds exactly A's data, or B's
        # static keys with a prefix of the writer's keys; never a mix. One worker everywhere,
        # so that records apply in the writer's order.
        rng = random.Random(23)
        a, b = self.start(threads=1), self.start(threads=1)
        akv, bkv = self.kv(a), self.kv(b)
        put_many(akv, [(b"a%05d" % i, b"A" * (i % 50), 0) for i in range(3000)])
        put_many(bkv, [(b"b%05d" % i, b"B" * (i % 70), 0) for i in range(50000)])
        a_data, b_static = self.contents(akv), self.contents(bkv)
        self.start_writer(bkv)
        flags = (f"--listen=127.0.0.1:{free_port()}", self.data_dir())
        outcomes = []
        for round in range(5 if SLOW == 1 else 2):
            replica = self.replica_of(a, *flags, threads=1)
            rkv = self.kv(replica, fresh=True)
            self.wait_stable(akv, rkv, replica)
            self.wait_snapshot(rkv, replica.started_ms)
            switched = self.cli(replica, "replicate", f"--to={b.address}")
            self.assertEqual(switched.returncode, 0, switched.stderr)
            # Before, during or after the image, or between the swap and the snapshot.
            time.sleep(rng.choice((0, 0.02, 0.05, 0.1, 0.2, 0.4)) * SLOW)
            self.kill9(replica)
            alone = self.start(*flags, threads=1)
            got = self.contents(self.kv(alone, fresh=True))
            alone.stop()
            alone.killed = True
            if got == a_data:
                outcomes.append("A")
                continue
            writes = sorted(k for k in got if k.startswith(b"w"))
            static = {k: v for k, v in got.items() if not k.startswith(b"w")}
            self.assertEqual(
                (static == b_static, writes == [b"w%07d" % i for i in range(len(writes))]),
                (True, True),
                f"round {round}: neither A's data nor B's: {len(got)} keys, "
                f"{sum(k.startswith(b'a') for k in got)} of A's, "
                f"{sum(k.startswith(b'b') for k in got)} of B's, {len(writes)} written")
            outcomes.append("B")
        print(f"  restored after the kill: {' '.join(outcomes)}", file=sys.stderr)

    def test_min_replicas(self):
        # --min-replicas=1: a write is refused (not run) while no replica follows; once one
        # does, each acknowledged write is already on it (read back from the replica at once);
        # a replica that stops applying (SIGSTOP) makes writes time out with UNAVAILABLE,
        # though they were run on the primary. A call's ringkv-min-replicas header asks for
        # more; a malformed one is refused.
        primary = self.start("--min-replicas=1", "--min-replicas-timeout=300ms")
        pkv = self.kv(primary)
        put = lambda key, value=b"v", metadata=(): pkv.Put(
            kv_pb2.PutRequest(key=key, value=value), timeout=CALL_TIMEOUT, metadata=metadata)
        with self.assertRaises(grpc.RpcError) as raised:
            put(b"alone")
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertIn("needs 1 replicas", raised.exception.details())
        self.assertIn("it was not run", raised.exception.details())
        self.assertIsNone(get(pkv, b"alone"))
        replica = self.replica_of(primary)
        rkv = self.kv(replica)

        def accepted():
            # Keys on every worker: each worker's flow counts once it tails.
            try:
                for i in range(16):
                    put(b"first-%d" % i)
                return True
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
        wait_until(accepted, 20 * SLOW, lambda: show(pkv))
        # Four writers; each reads its acknowledged write back from the replica at once.
        failures, done = [], [0]

        def write(n):
            try:
                for i in range(150):
                    key, value = b"w%d-%04d" % (n, i), b"value-%d-%d" % (n, i)
                    version = put(key, value).version
                    got = get(rkv, key)
                    if got is None or (got.value, got.version) != (value, version):
                        failures.append((key, version, got))
                    done[0] += 1
            except Exception as e:  # noqa: BLE001 - reported below
                failures.append(repr(e))
        threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(failures[:5], [], f"{len(failures)} acknowledged writes not on the replica")
        self.assertEqual(done[0], 600)
        self.assertTrue(all(f.replicas == 1 and f.acked_lsn > 0 for f in flows(pkv).values()),
                        show(pkv))
        # The call's header asks for more than the server's default; a malformed one is refused.
        with self.assertRaises(grpc.RpcError) as raised:
            put(b"two", metadata=(("ringkv-min-replicas", "2"),))
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertIn("needs 2 replicas", raised.exception.details())
        self.assertIsNone(get(pkv, b"two"))
        for bad in ("x", "17", "-1"):
            with self.assertRaises(grpc.RpcError) as raised:
                put(b"bad", metadata=(("ringkv-min-replicas", bad),))
            self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, bad)
            self.assertIn("from 0 to 16", raised.exception.details())
        # A replica that applies nothing: the write runs, but its answer says it was not
        # replicated; the primary counts it.
        self.pause(replica)
        started = time.time()
        with self.assertRaises(grpc.RpcError) as raised:
            put(b"stopped", b"late")
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertIn("0 of the 1 replicas", raised.exception.details())
        self.assertGreaterEqual(time.time() - started, 0.25)
        self.assertEqual(get(pkv, b"stopped").value, b"late")
        self.assertGreaterEqual(sum(f.not_replicated for f in flows(pkv).values()), 1)
        self.resume(replica)
        wait_until(accepted, 20, lambda: show(pkv))
        self.assertEqual(get(rkv, b"stopped").value, b"late")

    def test_a_linearizable_read_waits_for_the_writes_it_may_see(self):
        # A write that waits for its replica (stopped) has run on the primary: a plain read
        # sees it at once, a linearizable one is answered only once the write is, so that it
        # never returns what a failover may take back. With the replica back in time, both are
        # acknowledged. Past --min-replicas-timeout both fail, and a linearizable read fails
        # too until the replica has the write; then it returns it. With no write waiting, and
        # none that timed out, a linearizable read is answered at once.
        primary = self.start("--min-replicas=1", "--min-replicas-timeout=2s", threads=1)
        replica = self.replica_of(primary, threads=1)
        pkv = self.kv(primary)
        consistency = (("ringkv-consistency", "linearizable"),)
        put = lambda value: pkv.Put.future(kv_pb2.PutRequest(key=b"k", value=value),
                                           timeout=CALL_TIMEOUT)
        read = lambda: pkv.Get.future(kv_pb2.GetRequest(key=b"k"), timeout=CALL_TIMEOUT,
                                      metadata=consistency)

        def acknowledged():
            try:
                return put(b"v1").result().version > 0
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
        wait_until(acknowledged, 20, lambda: show(pkv))
        self.assertEqual(read().result(timeout=CALL_TIMEOUT).value, b"v1")
        for value, resumes in ((b"v2", True), (b"v3", False)):
            self.pause(replica)
            write = put(value)
            wait_until(lambda: get(pkv, b"k").value == value, 5, lambda: "the write never ran")
            reading = read()
            time.sleep(0.3)
            self.assertFalse(reading.done(), f"a linearizable read answered {value} while the "
                             "write it saw waited for its replica")
            if resumes:
                self.resume(replica)
                self.assertGreater(write.result(timeout=CALL_TIMEOUT).version, 0)
                self.assertEqual(reading.result(timeout=CALL_TIMEOUT).value, value)
                continue
            for call, says in ((write, "0 of the 1 replicas it needs"),
                               (reading, "are on 0 of the 1 replicas they need")):
                with self.assertRaises(grpc.RpcError) as raised:
                    call.result(timeout=CALL_TIMEOUT)
                self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE)
                self.assertIn(says, raised.exception.details())
            # A read that comes after the timeout waits for the write's replica as well.
            with self.assertRaises(grpc.RpcError) as raised:
                read().result(timeout=CALL_TIMEOUT)
            self.assertIn("so a failover could lose them", raised.exception.details())
        self.resume(replica)

        def settled():
            try:
                return read().result(timeout=CALL_TIMEOUT)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
        self.assertEqual(wait_until(settled, 20, lambda: show(pkv)).value, b"v3")
        self.assertEqual(read().result(timeout=1 * SLOW).value, b"v3")

    def test_promotion_after_kill9_loses_no_acknowledged_write(self):
        # --min-replicas=1 under four writers; the primary is killed (SIGKILL) at a random
        # moment, and the replica promoted by hand (ringkv replicate --stop): every write a
        # client had an answer for is on it, with its version, and it takes writes. Five
        # rounds (two under a sanitizer).
        rng = random.Random(22)
        acked_total = 0
        for round in range(5 if SLOW == 1 else 2):
            primary = self.start("--min-replicas=1")
            pkv = self.kv(primary, fresh=True)
            replica = self.replica_of(primary)
            rkv = self.kv(replica, fresh=True)

            def accepted():
                try:
                    return pkv.Put(kv_pb2.PutRequest(key=b"ready", value=b"v"),
                                   timeout=CALL_TIMEOUT)
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.UNAVAILABLE:
                        raise
            wait_until(accepted, 20, lambda: show(pkv))
            acked, stop = {}, threading.Event()

            def write(n):
                for i in range(1_000_000):
                    if stop.is_set():
                        return
                    key, value = b"r%d-w%d-%06d" % (round, n, i), b"value-%d" % i
                    try:
                        version = pkv.Put(kv_pb2.PutRequest(key=key, value=value),
                                          timeout=CALL_TIMEOUT).version
                    except grpc.RpcError:
                        continue  # Not acknowledged: it may or may not be anywhere.
                    acked[key] = (value, version)
            threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
            for t in threads:
                t.start()
            time.sleep(rng.uniform(0.3, 1.2) * SLOW)
            self.kill9(primary)
            stop.set()
            for t in threads:
                t.join()
            promoted = self.cli(replica, "replicate", "--stop")
            self.assertEqual(promoted.returncode, 0, promoted.stderr)
            self.assertIn("primary", promoted.stdout)
            self.assertEqual(stats(rkv).replication.role, "primary")
            keys = list(acked)
            lost = []
            for i in range(0, len(keys), 100):
                got = read(rkv, keys[i:i + 100])
                lost += [k for k in keys[i:i + 100]
                         if got.get(k) is None or got[k][:2] != acked[k]]
            self.assertEqual(lost[:5], [], f"round {round}: {len(lost)} of {len(keys)} "
                                           "acknowledged writes missing after the promotion")
            self.assertGreater(len(keys), 0, f"round {round}: no write was acknowledged")
            acked_total += len(keys)
            # The new primary serves writes, and its log says what happened.
            rkv.Put(kv_pb2.PutRequest(key=b"after", value=b"promotion"), timeout=CALL_TIMEOUT)
            self.assertTrue(any("promoted" in line for line in replica.log.lines),
                            "".join(replica.log.lines[-10:]))
        self.assertGreater(acked_total, 100)

    def test_replicate_follows_another_primary(self):
        # ringkv replicate --to: a replica switches primaries (a full sync from the new one,
        # whose data replaces the old one's); the bad uses get clear errors.
        first, second = self.start(), self.start()
        put_many(self.kv(first), [(b"one%03d" % i, b"1", 0) for i in range(100)])
        put_many(self.kv(second), [(b"two%03d" % i, b"2", 0) for i in range(200)])
        replica = self.replica_of(first)
        rkv = self.kv(replica)
        self.wait_stable(self.kv(first), rkv, replica)
        switched = self.cli(replica, "replicate", f"--to={second.address}")
        self.assertEqual(switched.returncode, 0, switched.stderr)
        self.assertIn(second.address, switched.stdout)
        skv = self.kv(second)
        self.wait_stable(skv, rkv, replica,
                         extra=lambda: sum(f.full_syncs for f in flows(rkv).values()) >= 4)
        self.assertEqual(self.compare(skv, rkv, at_least=200), 200)
        self.assertEqual(stats(rkv).replication.primary, second.address)
        self.assertRefused(lambda: rkv.Put(kv_pb2.PutRequest(key=b"k", value=b"v"),
                                           timeout=CALL_TIMEOUT), second.address)
        # A primary with a data directory steps down too: its data is replaced, on disk as
        # well (restarted alone, it holds the new primary's data).
        flags = (f"--listen=127.0.0.1:{free_port()}", self.data_dir())
        durable = self.start(*flags)
        dkv = self.kv(durable)
        put_many(dkv, [(b"own%03d" % i, b"d", 0) for i in range(50)])
        stepped = self.cli(durable, "replicate", f"--to={second.address}")
        self.assertEqual(stepped.returncode, 0, stepped.stderr)
        self.wait_stable(skv, dkv, durable)
        self.assertEqual(self.compare(skv, dkv, at_least=200), 200)
        expected = self.contents(skv)
        durable.stop()
        durable.killed = True
        alone = self.start(*flags)
        self.assertEqual(self.contents(self.kv(alone, fresh=True)), expected)
        # The flags are checked before anything is sent.
        for args in ((), ("--stop", f"--to={second.address}")):
            usage = self.cli(replica, "replicate", *args)
            self.assertEqual(usage.returncode, 2, usage.stderr)
            self.assertIn("--to=HOST:PORT or --stop", usage.stderr)
        self.assertEqual(self.cli(replica, "put", "k", "v", "--stop").returncode, 2)

    def test_a_promoted_replica_resumes_the_others(self):
        # Two replicas of a primary that is killed (SIGKILL); one is promoted by hand, the other
        # re-pointed to it (`ringkv replicate --to`).
        # - The other stands behind the promoted one (pointed at a closed port while writes went
        #   on): it resumes from its positions (no full sync), from the records the promoted
        #   one kept as a replica, and ends with its data. Those came to the promoted one in one
        #   message per worker (it was pointed away too, and resumed once they were all made),
        #   so the other's positions stand inside what the promoted one kept as one chunk.
        # - Then the roles turn: the promoted one is killed, and a replica that stands behind
        #   the other is promoted. The other now stands ahead (it holds writes the new primary
        #   never got): it full-syncs, and those writes are gone from it too.
        p = self.start()
        pkv = self.kv(p)
        put_many(pkv, [(b"k%04d" % i, b"before", 0) for i in range(1000)])
        a, b = self.replica_of(p), self.replica_of(p)
        akv, bkv = self.kv(a), self.kv(b)
        self.wait_stable(pkv, akv, a)
        self.wait_stable(pkv, bkv, b)
        nowhere = f"127.0.0.1:{free_port()}"
        self.assertEqual(self.cli(a, "replicate", f"--to={nowhere}").returncode, 0)
        for i in range(100):  # A record (a turn) each: the primary's chunks are small.
            pkv.Put(kv_pb2.PutRequest(key=b"w%04d" % i, value=b"w"), timeout=CALL_TIMEOUT)
        self.wait_stable(pkv, bkv, b)
        self.assertEqual(self.cli(b, "replicate", f"--to={nowhere}").returncode, 0)
        for i in range(100, 200):
            pkv.Put(kv_pb2.PutRequest(key=b"w%04d" % i, value=b"w"), timeout=CALL_TIMEOUT)
        self.assertEqual(self.cli(a, "replicate", f"--to={p.address}").returncode, 0)
        self.wait_stable(pkv, akv, a)
        expected = self.contents(akv)
        self.kill9(p)
        self.assertEqual(self.cli(a, "replicate", "--stop").returncode, 0)
        self.assertTrue(any("2 of 2 workers go on from their positions" in line
                            for line in a.log.lines), "".join(a.log.lines[-5:]))
        self.assertEqual(self.cli(b, "replicate", f"--to={a.address}").returncode, 0)
        akv.Put(kv_pb2.PutRequest(key=b"after", value=b"a"), timeout=CALL_TIMEOUT)
        self.wait_stable(akv, bkv, b, extra=lambda: all(
            f.partial_syncs >= 1 for f in flows(bkv).values()))
        self.assertEqual({w: f.full_syncs for w, f in flows(bkv).items()}, {0: 1, 1: 1})
        self.assertEqual(self.compare(akv, bkv, at_least=1201), 1201)
        self.assertEqual({k: e for k, e in self.contents(bkv).items() if k != b"after"},
                         expected)
        # The roles turn: c follows a, then nothing, while b gets writes c never sees.
        c = self.replica_of(a)
        ckv = self.kv(c)
        self.wait_stable(akv, ckv, c)
        self.assertEqual(self.cli(c, "replicate", f"--to={nowhere}").returncode, 0)
        put_many(akv, [(b"lost%03d" % i, b"l", 0) for i in range(300)])
        self.wait_stable(akv, bkv, b)
        self.kill9(a)
        self.assertEqual(self.cli(c, "replicate", "--stop").returncode, 0)
        self.assertEqual(self.cli(b, "replicate", f"--to={c.address}").returncode, 0)
        ckv.Put(kv_pb2.PutRequest(key=b"later", value=b"c"), timeout=CALL_TIMEOUT)
        self.wait_stable(ckv, bkv, b, extra=lambda: all(
            f.full_syncs == 2 for f in flows(bkv).values()))
        held = self.contents(bkv)
        self.assertEqual(held, self.contents(ckv))
        self.assertEqual([k for k in held if k.startswith(b"lost")], [])
        self.assertIn(b"later", held)

    def test_a_primary_that_steps_down_resumes_or_counts_what_it_drops(self):
        # A planned switchover by hand: the primary steps down to its caught-up replica
        # (`replicate --to`), which is then promoted (`replicate --stop`): the old primary goes
        # on from its own positions (no full sync), and follows the new one's writes.
        # Then the reverse, with writes the other never got: the one that steps down stands
        # past where the new primary continued its history, so it full-syncs, and counts (stats,
        # log) the records and keys that drops.
        a, akv, b, bkv = self.primary_and_replica(keys=500)
        self.assertEqual(self.cli(a, "replicate", f"--to={b.address}").returncode, 0)
        self.assertEqual(self.cli(b, "replicate", "--stop").returncode, 0)
        bkv.Put(kv_pb2.PutRequest(key=b"on-b", value=b"b"), timeout=CALL_TIMEOUT)
        self.wait_stable(bkv, akv, a, extra=lambda: all(
            f.partial_syncs >= 1 for f in flows(akv).values()))
        self.assertEqual({w: f.full_syncs for w, f in flows(akv).items()}, {0: 0, 1: 0})
        self.assertEqual(self.compare(bkv, akv, at_least=501), 501)
        # a follows nothing while b takes 50 writes; then a is promoted and b steps down to it.
        nowhere = f"127.0.0.1:{free_port()}"
        self.assertEqual(self.cli(a, "replicate", f"--to={nowhere}").returncode, 0)
        put_many(bkv, [(b"dropped%02d" % i, b"d", 0) for i in range(50)])
        self.assertEqual(self.cli(a, "replicate", "--stop").returncode, 0)
        self.assertEqual(self.cli(b, "replicate", f"--to={a.address}").returncode, 0)
        akv.Put(kv_pb2.PutRequest(key=b"on-a", value=b"a"), timeout=CALL_TIMEOUT)
        self.wait_stable(akv, bkv, b, extra=lambda: all(
            f.full_syncs == 2 for f in flows(bkv).values()))  # Its first was from a.
        self.assertEqual(sum(f.dropped_records for f in flows(bkv).values()), 50, show(bkv))
        self.assertEqual(sum(f.dropped_keys for f in flows(bkv).values()), 50, show(bkv))
        listed = self.cli(b, "stats").stdout
        self.assertEqual(sum(int(n) for n in re.findall(r"dropped (\d+) records on", listed)), 50,
                         listed)
        self.assertEqual(self.compare(akv, bkv, at_least=502), 502)
        self.assertEqual([k for k in self.contents(bkv) if k.startswith(b"dropped")], [])
        self.assertTrue(any("the full sync drops" in line for line in b.log.lines),
                        "".join(b.log.lines[-10:]))

    def test_primary_steps_down_and_back(self):
        # A primary with a replica of its own becomes a replica of another primary at run time
        # (`replicate --to`): its data is replaced by the other's, it refuses writes naming it,
        # and its own replica loses its flows. Promoted again, it serves writes, and its old
        # replica full-syncs from it (no resume into positions of the run before).
        a, akv, r, rkv = self.primary_and_replica(keys=300)
        b = self.start()
        bkv = self.kv(b)
        put_many(bkv, [(b"b%03d" % i, b"b", 0) for i in range(200)])
        stepped = self.cli(a, "replicate", f"--to={b.address}")
        self.assertEqual(stepped.returncode, 0, stepped.stderr)
        self.wait_stable(bkv, akv, a)
        self.assertEqual(self.compare(bkv, akv, at_least=200), 200)  # a's own keys are gone.
        self.assertRefused(lambda: akv.Put(kv_pb2.PutRequest(key=b"k", value=b"v"),
                                           timeout=CALL_TIMEOUT), b.address)
        self.wait_flows(rkv, 2, lambda f: f.state == "connecting")
        promoted = self.cli(a, "replicate", "--stop")
        self.assertEqual(promoted.returncode, 0, promoted.stderr)
        akv.Put(kv_pb2.PutRequest(key=b"after", value=b"a"), timeout=CALL_TIMEOUT)
        self.wait_stable(akv, rkv, r,
                         extra=lambda: all(f.full_syncs == 2 for f in flows(rkv).values()))
        self.assertEqual(self.compare(akv, rkv, at_least=201), 201)
        self.assertEqual(sum(f.partial_syncs for f in flows(rkv).values()), 0, show(rkv))

    def test_full_sync_cut_short_keeps_the_old_data(self):
        # A replica switched to another primary, which is killed with SIGKILL in the middle of
        # the full sync: the replica still holds exactly what it had (the image loads beside
        # it, --full-sync-keeps-data), serves it, and says why it is not syncing.
        a, akv, r, rkv = self.primary_and_replica(keys=300)
        b = self.start()
        load = subprocess.run([LOADGEN, f"--addr={b.address}", "--keys=200000",
                               "--value-size=200", "--ops=1", "--concurrency=1",
                               "--progress=false"], capture_output=True, text=True,
                              timeout=120 * SLOW)
        self.assertEqual(load.returncode, 0, load.stderr)
        switched = self.cli(r, "replicate", f"--to={b.address}")
        self.assertEqual(switched.returncode, 0, switched.stderr)
        # Both flows mid-sync: one that had not begun when the primary died would not count a
        # second full sync (a flake under TSan, where a flow can start late).
        wait_until(lambda: [f.state for f in flows(rkv).values()] == ["full_sync"] * 2, 30,
                   lambda: show(rkv), poll=0.001)
        self.kill9(b)
        got = self.wait_flows(rkv, 2, lambda f: f.state == "connecting" and f.last_error != "")
        self.assertTrue(all(f.full_syncs == 2 for f in got.values()), show(rkv))
        self.assertEqual(self.compare(akv, rkv, at_least=300), 300)

    def test_replication_token_role(self):
        # Under --auth-token-file a replica needs a token with the replication role (or a
        # higher one): a read token is refused with a clear last_error; a replication token
        # follows, yet may not write.
        data = tempfile.mkdtemp(prefix="ringkv-replication-")
        self.addCleanup(shutil.rmtree, data, True)
        tokens = {"read": "read-token-0123456789", "replication": "replication-token-0123456789",
                  "admin": "admin-token-0123456789"}
        token_file = os.path.join(data, "tokens")
        with open(token_file, "w") as f:
            f.write("".join(f"{t} {role}\n" for role, t in tokens.items()))
        os.chmod(token_file, 0o600)
        for role in ("read", "replication"):
            with open(os.path.join(data, role), "w") as f:
                f.write(tokens[role] + "\n")
        primary = self.start(f"--auth-token-file={token_file}")
        admin = (("authorization", "Bearer " + tokens["admin"]),)
        pkv = self.kv(primary)
        pkv.Put(kv_pb2.PutRequest(key=b"k", value=b"v"), timeout=CALL_TIMEOUT, metadata=admin)
        refused = self.replica_of(primary, f"--primary-token-file={os.path.join(data, 'read')}")
        got = self.wait_flows(self.kv(refused), 2, lambda f: "needs the replication role"
                              in f.last_error)
        self.assertTrue(all(f.full_syncs == 0 for f in got.values()))
        replica = self.replica_of(
            primary, f"--primary-token-file={os.path.join(data, 'replication')}")
        rkv = self.kv(replica)
        self.wait_flows(rkv, 2, lambda f: f.state == "stable" and f.lag_records == 0)
        self.assertEqual(get(rkv, b"k").value, b"v")
        with self.assertRaises(grpc.RpcError) as raised:
            pkv.Put(kv_pb2.PutRequest(key=b"k", value=b"w"), timeout=CALL_TIMEOUT,
                    metadata=(("authorization", "Bearer " + tokens["replication"]),))
        self.assertEqual(raised.exception.code(), grpc.StatusCode.PERMISSION_DENIED)

    def test_tls_to_the_primary(self):
        # A primary that requires TLS and a client certificate (mTLS): a replica follows it
        # with --primary-tls-ca, --primary-tls-cert and --primary-tls-key; one in plaintext, and
        # one without a certificate, are refused and say so, and sync nothing.
        certs = tempfile.mkdtemp(prefix="ringkv-replication-tls-")
        self.addCleanup(shutil.rmtree, certs, True)
        make_certificates(certs)
        path = lambda name: os.path.join(certs, name)  # noqa: E731
        primary = self.start(f"--tls-cert={path('server.pem')}", f"--tls-key={path('server.key')}",
                             f"--tls-client-ca={path('ca.pem')}")
        with open(path("ca.pem"), "rb") as ca, open(path("client.key"), "rb") as key, \
                open(path("client.pem"), "rb") as cert:
            credentials = grpc.ssl_channel_credentials(ca.read(), key.read(), cert.read())
        channel = grpc.secure_channel(primary.address, credentials, options=CHANNEL_OPTIONS)
        self.addCleanup(channel.close)
        pkv = kv_pb2_grpc.KVStub(channel)
        put_many(pkv, [(b"k%03d" % i, b"v%03d" % i, 0) for i in range(200)])
        plaintext = self.replica_of(primary)
        no_cert = self.replica_of(primary, f"--primary-tls-ca={path('ca.pem')}")
        replica = self.replica_of(primary, f"--primary-tls-ca={path('ca.pem')}",
                                  f"--primary-tls-cert={path('client.pem')}",
                                  f"--primary-tls-key={path('client.key')}")
        rkv = self.kv(replica)
        self.wait_stable(pkv, rkv, replica)
        self.compare(pkv, rkv, at_least=200)
        for refused in (plaintext, no_cert):
            got = self.wait_flows(self.kv(refused), 2, lambda f: f.last_error != "")
            self.assertTrue(all(f.full_syncs == 0 and f.state == "connecting"
                                for f in got.values()), show(self.kv(refused)))
        # Usage errors.
        for flags, error in (([f"--primary-tls-cert={path('client.pem')}"],
                              "--primary-tls-cert and --primary-tls-key go together"),
                             (["--primary-tls"], "need --replica-of")):
            r = subprocess.run([SERVER, "--listen=127.0.0.1:0", *flags], capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(error, r.stderr)
        r = subprocess.run([SERVER, "--listen=127.0.0.1:0", f"--replica-of={primary.address}",
                            f"--primary-tls-ca={path('missing.pem')}"], capture_output=True,
                           text=True, timeout=30)
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertIn("--primary-tls-ca", r.stderr)
        # Files that are there but hold the wrong thing are refused at start, not at each
        # connection.
        for flags, error in (([f"--primary-tls-ca={path('client.key')}"],
                              "--primary-tls-ca: no certificate in it"),
                             ([f"--primary-tls-ca={path('ca.pem')}",
                               f"--primary-tls-cert={path('client.pem')}",
                               f"--primary-tls-key={path('server.key')}"],
                              "--primary-tls-key: no private key of --primary-tls-cert")):
            r = subprocess.run([SERVER, "--listen=127.0.0.1:0",
                                f"--replica-of={primary.address}", *flags],
                               capture_output=True, text=True, timeout=30)
            self.assertNotEqual(r.returncode, 0, r.stderr)
            self.assertIn(error, r.stderr)

    # Bad setups: each gets a clear error, and the replica stays up, retrying and serving reads.

    def wait_flows(self, kv, count, predicate, timeout=10):
        """Waits until the server has `count` flows and predicate(flow) holds for each;
        returns them, by worker."""
        def check():
            got = flows(kv)
            return got if len(got) == count and all(map(predicate, got.values())) else None
        return wait_until(check, timeout, lambda: show(kv))

    def assertServesReads(self, server, kv):
        self.assertIsNone(server.process.poll(), "the replica exited")
        self.assertIsNone(get(kv, b"k"))
        self.assertEqual(scan_keys(kv), set())

    def test_lists_a_wildcard_replica_at_its_peer_address(self):
        # A replica that listens on 0.0.0.0 names no machine: the primary lists it at the
        # address its connection comes from, with the port it listens on.
        primary = self.start()
        replica = self.replica_of(primary, "--listen=0.0.0.0:0", "--insecure")
        pkv = self.kv(primary)
        wait_until(lambda: sorted((f.address, f.worker)
                                  for f in stats(pkv).replication.replicas)
                   == [(replica.address, 0), (replica.address, 1)], 10, lambda: show(pkv))

    def test_bad_setup_threads_mismatch(self):
        primary = self.start()
        replica = self.replica_of(primary, threads=1)
        pkv, rkv = self.kv(primary), self.kv(replica)
        f = self.wait_flows(rkv, 1, lambda f: "--threads" in f.last_error)[0]
        self.assertNotEqual(f.state, "stable")
        self.assertEqual(f.full_syncs, 0)
        self.assertServesReads(replica, rkv)
        self.assertTrue(all(f.replicas == 0 for f in flows(pkv).values()), show(pkv))

    def test_bad_setup_replica_of_itself(self):
        port = free_port()
        # A --listen after RingkvServer's own --listen=127.0.0.1:0 wins (the last one does).
        server = self.start(f"--listen=127.0.0.1:{port}", f"--replica-of=127.0.0.1:{port}")
        self.assertEqual(server.address, f"127.0.0.1:{port}")
        kv = self.kv(server)
        got = self.wait_flows(kv, 2, lambda f: re.search(r"\bitself\b", f.last_error))
        for f in got.values():
            # Not the refusal of chains ("--replica-of names a replica"): it is the same one.
            self.assertNotIn("names a replica", f.last_error)
            self.assertNotEqual(f.state, "stable")
            self.assertEqual(f.full_syncs, 0)
        self.assertServesReads(server, kv)

    def test_bad_setup_data_dir_with_a_dropping_full_sync_refused(self):
        data = tempfile.mkdtemp(prefix="ringkv-replication-")
        self.addCleanup(shutil.rmtree, data, True)
        r = subprocess.run([SERVER, "--listen=127.0.0.1:0", "--threads=2",
                            f"--replica-of=127.0.0.1:{free_port()}", "--full-sync-keeps-data=false",
                            f"--data-dir={os.path.join(data, 'data')}", *SERVER_FLAGS],
                           capture_output=True, text=True, timeout=10 * SLOW)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--full-sync-keeps-data=false cannot go with --data-dir", r.stderr)
        r = subprocess.run([SERVER, "--replica-of=127.0.0.1:1", "--min-replicas=1"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--min-replicas is for a primary", r.stderr)

    def test_promotion_does_not_wait_for_a_silent_primary(self):
        # A primary whose port takes connections (the kernel's backlog) and never answers the
        # TLS handshake: each flow waits in its handshake, for up to 5 s. A promotion ends
        # them at once, and the server takes writes.
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        self.addCleanup(silent.close)
        port = silent.getsockname()[1]
        server = self.start(f"--replica-of=127.0.0.1:{port}", "--primary-tls")

        def waiting():  # Connections in the listener's accept queue (ss's Recv-Q).
            out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                                 text=True, timeout=10).stdout.split()
            return int(out[1]) if len(out) > 1 else 0
        wait_until(lambda: waiting() >= 2, 10, lambda: f"{waiting()} connections")
        began = time.monotonic()
        promoted = self.cli(server, "replicate", "--stop")
        took = time.monotonic() - began
        self.assertEqual(promoted.returncode, 0, promoted.stderr)
        self.assertLess(took, 3.0, "the promotion waited for the handshakes to time out")
        put_many(self.kv(server), [(b"k", b"v", 0)])
        self.assertEqual(get(self.kv(server), b"k").value, b"v")

    def test_a_flow_closed_before_its_first_message_ends(self):
        # A Flow whose client closes its side before saying which replica it is is answered
        # INVALID_ARGUMENT; one cancelled then ends too. On grpc++ a cancel reads as a close:
        # such a call once stayed open for good, and the server never stopped.
        server = self.start()
        channel = grpc.insecure_channel(server.address, options=CHANNEL_OPTIONS)
        self.addCleanup(channel.close)
        flow = channel.stream_stream("/ringkv.v1.Replication/Flow",
                                     request_serializer=kv_pb2.FlowRequest.SerializeToString,
                                     response_deserializer=kv_pb2.FlowMessage.FromString)
        with self.assertRaises(grpc.RpcError) as closed:
            list(flow(iter(()), timeout=CALL_TIMEOUT))
        self.assertEqual(closed.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("closed without one", closed.exception.details())
        release = threading.Event()

        def nothing_yet():
            release.wait(30)
            yield from ()
        call = flow(nothing_yet(), timeout=30)
        time.sleep(0.3 * SLOW)  # The server has the call, and waits for its first message.
        call.cancel()
        release.set()
        self.assertServesReads(server, self.kv(server))
        server.stop()  # Fails the test unless it stops within ringkv_server.STOP_S.
        server.killed = True  # Stopped here, not by the cleanup.

    def test_bad_setup_not_a_ringkv_port(self):
        listener = ClosingListener()
        self.addCleanup(listener.close)
        address = f"127.0.0.1:{listener.port}"
        replica = self.start(f"--replica-of={address}")
        kv = self.kv(replica)
        got = self.wait_flows(kv, 2, lambda f: f.last_error)
        self.assertGreater(listener.accepted, 0)
        for f in got.values():
            self.assertNotEqual(f.state, "stable")
            self.assertEqual(f.full_syncs, 0)
        self.assertServesReads(replica, kv)
        self.assertRefused(lambda: kv.Put(kv_pb2.PutRequest(key=b"k", value=b"v"),
                                          timeout=CALL_TIMEOUT), address)


if __name__ == "__main__":
    venv_main.run(TOOLS)
