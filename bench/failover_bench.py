#!/usr/bin/python3
"""Failover time and lost acknowledged writes (issue 23): ringkv's group on etcd against Redis
Sentinel, in the same run, with the same request shape.

Each system: three servers on loopback, one worker each (ringkv --threads=1; Redis is
single-threaded), every write waiting for one replica (ringkv --min-replicas=1; Redis: SET
then WAIT 1 1000, acknowledged only if WAIT says 1), two writers putting unique keys without
pause, each to the primary it knows (ringkv: whichever server acknowledges; Redis: the master
its sentinel names). ROUNDS rounds, each: once every replica follows the primary, a second of
writes, then kill -9 the primary, and take the time from the kill
to the first write the new primary acknowledges; once it has, start the killed server again
on its port, empty, and wait until it follows the new primary.
- ringkv: --failover-timeout=2s on a one-member etcd (Debian's etcd-server).
- Redis: three sentinels (quorum 2), down-after-milliseconds 2000 (the same 2 s), failover-timeout
  10000, diskless syncs. The killed master is started again only after the failover, as a
  supervisor must with Redis: one back within down-after-milliseconds, empty, would be taken
  back as the master, and its replicas would copy its empty data set.
At the end: the acknowledged writes the last primary lacks. The writers are Python (grpcio
for ringkv, plain sockets for Redis): their rates differ and are not the measure here.

Part steady, the cost of being in a group: (1) idle, a primary and its replica in a group on
etcd, beside a primary and its replica with no group, IDLE_S seconds each: the CPU each server
and etcd took, from /proc; (2) PUT, ringkv-loadgen at 50 connections x 1 call, 32-byte values
over 100,000 keys, SECONDS each, RUNS runs alternated (each first in every other run): a
primary alone (--threads=1) against
the elected primary of a one-server group, with the server's CPU per operation.

Part acks, what the in-sync set costs: PUT on the primary of a group of three (two replicas),
--threads=1 --min-replicas=1, with --acks=count (any one replica) against --acks=isr (both),
RUNS runs alternated, ringkv-loadgen as above.

Part failover also runs ringkv with --acks=isr (its rounds between ringkv's and Redis's).

Part resync, what a failover costs once the data is large: ringkv's --acks=isr rounds as in
part failover, RESYNC_ROUNDS rounds, with PRELOAD keys (16-byte keys, 32-byte values, by
ringkv-loadgen) put before the first. Every write waits for a member of the in-sync set, and a
new primary starts with an empty set, so writes resume once a replica has caught up with it:
from its positions (a partial resync), or after a full sync of the whole data set. With
OLD_SERVER=PATH (a ringkv-server built from an earlier commit) the same rounds run on it too,
in the same run; the log lines of partial resyncs are counted for each.

Part switchover, a planned failover: the setups of part failover (ringkv with --acks=isr),
SWITCH_ROUNDS rounds each: once every replica follows, WRITE_S seconds of writes, then ringkv's
`ringkv failover --to=R` (R: the next server in turn) against Redis's `SENTINEL FAILOVER m`;
the writes' pause, from the last write the old primary acknowledged to the first the new one
did, and ringkv's own figure (the command's writes_paused_ms); lost writes at the end.

Usage: [PARTS=failover,steady,acks,resync,switchover] [PRELOAD=1000000] [RESYNC_ROUNDS=5]
[SWITCH_ROUNDS=10] [OLD_SERVER=PATH] bench/failover_bench.py [ROUNDS=20] [RUNS=3] [SECONDS=5]
[IDLE_S=30] (repository root, after scripts/setup.sh; re-runs itself under .tools/venv for
grpcio). Prints markdown; raw results in bench-results/failover/.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "server", "testing"))
from benchlib import (cell, cpu_seconds, free_port, machine, run_client,  # noqa: E402
                      run_under_venv, start_ringkv, stop)
from etcd_process import Etcd  # noqa: E402
import group_writers  # noqa: E402
import python_stubs  # noqa: E402

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
SECONDS = int(sys.argv[3]) if len(sys.argv) > 3 else 5
IDLE_S = int(sys.argv[4]) if len(sys.argv) > 4 else 30
PARTS = os.environ.get("PARTS", "failover,steady,acks,resync,switchover").split(",")
SWITCH_ROUNDS = int(os.environ.get("SWITCH_ROUNDS", "10"))
CLI = "build/client/ringkv"
PRELOAD = int(os.environ.get("PRELOAD", "1000000"))
RESYNC_ROUNDS = int(os.environ.get("RESYNC_ROUNDS", "5"))
OLD_SERVER = os.environ.get("OLD_SERVER", "")
LOADGEN = "build/bench/ringkv-loadgen"
OUT = "bench-results/failover"
SERVER = "build/server/ringkv-server"
TTL_S = 2
WRITE_S = 1  # Seconds of writes in each round, from the first acknowledged, before the kill.


def wait_until(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {timeout} s: {what}")
        time.sleep(0.02)


def kill_and_time(procs, primary, others, writers, timeout):
    """A round: WRITE_S seconds of writes from the primary's first acknowledgement on, kill -9
    of the primary, then the seconds until one of `others` acknowledges a write, and those
    acknowledgements."""
    settled = time.monotonic()
    wait_until(lambda: writers.acks_after(settled, primary), 10, "no writes")
    time.sleep(WRITE_S)
    procs[primary].kill()
    killed = time.monotonic()
    procs[primary].wait()
    first = wait_until(lambda: [a for o in others for a in writers.acks_after(killed, o)],
                       timeout, "the group never took writes again")
    return min(a[2] for a in first) - killed, first


def switch_and_time(primary, others, writers, switch):
    """A planned round: WRITE_S seconds of writes from the primary's first acknowledgement on,
    then `switch()`; the writes' pause (from the last write the old primary acknowledged to
    the first one of `others` did), the new primary, and what `switch` returned."""
    settled = time.monotonic()
    wait_until(lambda: writers.acks_after(settled, primary), 10, "no writes")
    time.sleep(WRITE_S)
    started = time.monotonic()
    reported = switch()
    first = wait_until(lambda: [a for o in others for a in writers.acks_after(started, o)],
                       30, "the group never took writes again")
    first_new = min(first, key=lambda a: a[2])
    last_old = max(a[2] for a in writers.acks_after(settled, primary) if a[2] <= first_new[2])
    return first_new[2] - last_old, first_new[1], reported


# ringkv.

def ringkv_rounds(work, grpc, pb, stubs, flags=(), server=SERVER, rounds=None, preload=0,
                  switch=False):
    """ROUNDS (or `rounds`) kill -9 rounds of a group of three, or with `switch` planned
    failovers (`ringkv failover`); with `preload`, that many keys are put (once every server
    follows, and with --acks=isr the set has a member) first."""
    etcd = Etcd(work)
    etcd.start()
    group = "bench"
    ports = [free_port() for _ in range(3)]
    addresses = [f"127.0.0.1:{p}" for p in ports]
    procs = {}

    def start(address):
        log = open(os.path.join(work, f"ringkv-{address.rsplit(':', 1)[1]}.log"), "a")
        procs[address] = subprocess.Popen(
            [server, f"--listen={address}", "--threads=1", "--min-replicas=1",
             f"--etcd={etcd.endpoint}", f"--group={group}", f"--failover-timeout={TTL_S}s",
             *flags],
            stderr=log)

    def follows(address, primary):
        try:
            with grpc.insecure_channel(address) as channel:
                r = stubs.KVStub(channel).Stats(pb.StatsRequest(), timeout=2).replication
        except grpc.RpcError:
            return False
        return r.role == "replica" and r.primary == primary and all(
            f.state == "stable" for f in r.flows)

    for address in addresses:
        start(address)
    times = []
    reported = []
    try:
        _, _, leader = wait_until(lambda: etcd.leader(group), 10, "nobody elected")
        if preload:
            for other in (a for a in addresses if a != leader):
                wait_until(lambda: follows(other, leader), 20, f"{other} never followed")
            if "--acks=isr" in flags:
                wait_until(lambda: etcd.etcdctl("get", "--print-value-only",
                                                f"/ringkv/{group}/in_sync").stdout.split()[2:],
                           20, "the in-sync set never had a member")
            subprocess.run([LOADGEN, f"--addr={leader}", f"--keys={preload}", "--preload",
                            "--ops=1", "--ratio=0:1", "--progress=false"], check=True,
                           stdout=subprocess.DEVNULL)
        writers = group_writers.Writers(grpc, pb, stubs, addresses)
        for _ in range(rounds or ROUNDS):
            _, _, primary = wait_until(lambda: etcd.leader(group), 10, "no leader")
            others = [a for a in addresses if a != primary]
            for other in others:
                wait_until(lambda: follows(other, primary), 20, f"{other} never followed")
            if switch:
                def failover(target=others[0]):
                    r = subprocess.run([CLI, f"--etcd={etcd.endpoint}", f"--group={group}",
                                        "--json", "failover", f"--to={target}"],
                                       capture_output=True, text=True, check=True)
                    return json.loads(r.stdout)["writes_paused_ms"]
                took, _, said = switch_and_time(primary, others, writers, failover)
                reported.append(said / 1000)
            else:
                took, _ = kill_and_time(procs, primary, others, writers, 30)
                start(primary)
            times.append(took)
        writers.stop()
        _, _, primary = etcd.leader(group)
        lost = len(writers.lost_on(primary))
        resumed = 0
        for name in os.listdir(work):
            if name.startswith("ringkv-") and name.endswith(".log"):
                with open(os.path.join(work, name)) as f:
                    resumed += f.read().count("partial resync from")
        return {"times": times, "acked": len(writers.acked), "lost": lost, "resumed": resumed,
                "reported": reported}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        etcd.kill()


def acks_cost(work, grpc, pb, stubs):
    """PUT on the primary of a group of three (two replicas), --min-replicas=1, with
    --acks=count against --acks=isr, alternated; the primary's CPU per operation."""
    etcd = Etcd(work)
    etcd.start()
    out = {"count": [], "isr": []}

    def streaming(addr):
        with grpc.insecure_channel(addr) as channel:
            r = stubs.KVStub(channel).Stats(pb.StatsRequest(), timeout=2).replication
        return sum(1 for f in r.replicas if f.state == "streaming") == 2

    def in_sync(group):
        r = etcd.etcdctl("get", "--print-value-only", f"/ringkv/{group}/in_sync")
        return r.stdout.split()[2].count(",") == 1 if r.stdout.strip() else False

    try:
        for run in range(RUNS):
            for acks in ("count", "isr") if run % 2 == 0 else ("isr", "count"):
                group = f"acks{run}{acks}"
                flags = ["--threads=1", "--min-replicas=1", f"--acks={acks}",
                         f"--etcd={etcd.endpoint}", f"--group={group}",
                         f"--failover-timeout={TTL_S}s"]
                procs = []
                try:
                    primary, addr = start_ringkv(os.path.join(work, f"{group}-p.log"), flags)
                    procs.append(primary)
                    wait_until(lambda: etcd.leader(group), 10, "nobody elected")
                    for i in range(2):
                        procs.append(start_ringkv(os.path.join(work, f"{group}-r{i}.log"),
                                                  flags)[0])
                    wait_until(lambda: streaming(addr), 20, "the replicas never streamed")
                    if acks == "isr":
                        wait_until(lambda: in_sync(group), 20, "the set never held both")
                    out[acks].append(put_run(addr, primary.pid))
                finally:
                    for proc in reversed(procs):
                        stop(proc)
    finally:
        etcd.kill()
    return out


# Redis and Sentinel, spoken to in RESP over plain sockets.

def resp(*args):
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def read_reply(f):
    line = f.readline()
    if not line:
        raise OSError("connection closed")
    kind, rest = line[:1], line[1:-2]
    if kind in (b"+", b"-"):
        return (kind == b"+", rest)
    if kind == b":":
        return (True, int(rest))
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return (True, None)
        data = f.read(n + 2)[:-2]
        return (True, data)
    if kind == b"*":
        return (True, [read_reply(f)[1] for _ in range(int(rest))])
    raise OSError(f"unexpected reply {line!r}")


def call(port, *args, timeout=2):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(resp(*args))
        return read_reply(s.makefile("rb"))


class RedisWriters:
    """Like group_writers.Writers: SET then WAIT 1 1000 to the master a sentinel names;
    acknowledged only when WAIT counts the replica."""

    def __init__(self, sentinels, count=2):
        self.sentinels = sentinels
        self.acked = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(f"w{i}-",))
                        for i in range(count)]
        for t in self.threads:
            t.start()

    def master(self):
        for port in self.sentinels:
            try:
                ok, got = call(port, "SENTINEL", "get-master-addr-by-name", "m", timeout=0.5)
                if ok and got:
                    return int(got[1])
            except OSError:
                continue
        return None

    def run(self, prefix):
        n, sock, port = 0, None, None
        while not self.stopping.is_set():
            if sock is None:
                port = self.master()
                try:
                    sock = socket.create_connection(("127.0.0.1", port), timeout=1.5)
                    f = sock.makefile("rb")
                except (OSError, TypeError):
                    sock = None
                    time.sleep(0.02)
                    continue
            key, value = f"{prefix}{n}".encode(), f"v{n}".encode()
            n += 1
            try:
                sock.sendall(resp("SET", key, value) + resp("WAIT", 1, 1000))
                set_ok, _ = read_reply(f)
                _, replicas = read_reply(f)
            except OSError:
                sock.close()
                sock = None
                continue
            if not set_ok:  # READONLY: a replica now.
                sock.close()
                sock = None
                continue
            if isinstance(replicas, int) and replicas >= 1:
                with self.lock:
                    self.acked[key] = (value, port, time.monotonic())

    def acks_after(self, t, port):
        with self.lock:
            return [a for a in self.acked.values() if a[2] > t and a[1] == port]

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join()


def redis_rounds(work, switch=False):
    ports = [free_port() for _ in range(3)]
    sentinel_ports = [free_port() for _ in range(3)]
    procs = {}

    def start(port, master=None):
        d = os.path.join(work, f"redis-{port}")
        os.makedirs(d, exist_ok=True)
        procs[port] = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
             "--save", "", "--appendonly", "no", "--repl-diskless-sync", "yes",
             "--repl-diskless-sync-delay", "0", "--logfile", os.path.join(d, "log"),
             *(["--replicaof", "127.0.0.1", str(master)] if master else [])])
        wait_until(lambda: ping(port), 10, f"redis on {port}")

    def ping(port):
        try:
            return call(port, "PING", timeout=0.5)[0]
        except OSError:
            return False

    def role(port):
        try:
            ok, got = call(port, "ROLE", timeout=0.5)
        except OSError:
            return None
        return got if ok else None

    start(ports[0])
    for p in ports[1:]:
        start(p, ports[0])
    sentinels = []
    for sp in sentinel_ports:
        conf = os.path.join(work, f"sentinel-{sp}.conf")
        with open(conf, "w") as f:
            f.write(f"port {sp}\nbind 127.0.0.1\ndir {work}\n"
                    f"logfile {work}/sentinel-{sp}.log\n"
                    f"sentinel monitor m 127.0.0.1 {ports[0]} 2\n"
                    f"sentinel down-after-milliseconds m {TTL_S * 1000}\n"
                    f"sentinel failover-timeout m 10000\nsentinel parallel-syncs m 1\n")
        sentinels.append(subprocess.Popen(["redis-server", conf, "--sentinel"]))
    times = []
    try:
        for sp in sentinel_ports:
            wait_until(lambda: ping(sp), 10, f"sentinel on {sp}")
        writers = RedisWriters(sentinel_ports)
        master = ports[0]
        for _ in range(SWITCH_ROUNDS if switch else ROUNDS):
            others = [p for p in ports if p != master]

            def synced(p, master=master):
                r = role(p)
                return r and r[0] == b"slave" and r[2] == master and r[3] == b"connected"
            for p in others:
                wait_until(lambda: synced(p), 60, f"redis {p} never followed {master}")
            if switch:
                def failover():
                    ok, got = call(sentinel_ports[0], "SENTINEL", "FAILOVER", "m", timeout=5)
                    if not ok:
                        raise RuntimeError(f"SENTINEL FAILOVER: {got}")
                took, master, _ = switch_and_time(master, others, writers, failover)
                times.append(took)
                continue
            took, first = kill_and_time(procs, master, others, writers, 60)
            times.append(took)
            new_master = first[0][1]
            start(master)  # Sentinel turns it into a replica of the new master.
            master = new_master
        writers.stop()
        lost = 0
        keys = sorted(writers.acked)
        for i in range(0, len(keys), 500):
            batch = keys[i:i + 500]
            _, got = call(master, "MGET", *batch, timeout=10)
            lost += sum(1 for k, v in zip(batch, got) if v != writers.acked[k][0])
        return {"times": times, "acked": len(writers.acked), "lost": lost}
    finally:
        for proc in [*procs.values(), *sentinels]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# The steady cost of a group.

def put_run(addr, pid):
    """PUT at 50 connections x 1 call, 32-byte values over 100,000 keys (written once first),
    SECONDS: ops/s, errors and the CPU per operation of the server `pid` and of the client."""
    subprocess.run([LOADGEN, f"--addr={addr}", "--keys=100000", "--value-size=32", "--ops=1",
                    "--concurrency=1", "--progress=false"], capture_output=True, check=True)
    path = os.path.join(OUT, "loadgen.json")
    _, cpu = run_client([LOADGEN, f"--addr={addr}", "--keys=100000", "--value-size=32",
                         f"--duration={SECONDS}", "--progress=false", "--preload=false",
                         f"--json={path}", "--mode=unary", "--ratio=0:1", "--connections=50",
                         "--concurrency=50"], pid, SECONDS * 10 + 60)
    r = json.load(open(path))
    return {"ops_per_s": r["ops_per_s"], "errors": r.get("errors", 0), **cpu.per_op(r["ops"])}


def steady(work, grpc, pb, stubs):
    etcd = Etcd(work)
    etcd.start()
    out = {"idle": {}, "put": {"alone": [], "group": []}}
    try:
        for grouped in (False, True):
            group = ["--etcd=" + etcd.endpoint, "--group=idle"] if grouped else []
            primary, addr = start_ringkv(os.path.join(work, f"p{grouped}.log"),
                                         ["--threads=1", *group])
            if grouped:
                wait_until(lambda: etcd.leader("idle"), 10, "nobody elected")
            replica, _ = start_ringkv(os.path.join(work, f"r{grouped}.log"),
                                      ["--threads=1", *group,
                                       *([] if grouped else [f"--replica-of={addr}"])])
            time.sleep(3)  # The full sync and the election settle.
            pids = {"primary": primary.pid, "replica": replica.pid, "etcd": etcd.process.pid}
            before = {k: cpu_seconds(p) for k, p in pids.items()}
            time.sleep(IDLE_S)
            out["idle"]["group" if grouped else "alone"] = {
                k: 100 * (cpu_seconds(p) - before[k]) / IDLE_S for k, p in pids.items()}
            stop(replica)
            stop(primary)
        for run in range(RUNS):
            # Each goes first in every other run.
            for name in ("alone", "group") if run % 2 == 0 else ("group", "alone"):
                group = (["--etcd=" + etcd.endpoint, f"--group=put{run}"] if name == "group"
                         else [])
                proc, addr = start_ringkv(os.path.join(work, f"{name}{run}.log"),
                                          ["--threads=1", *group])
                try:
                    if group:
                        wait_until(lambda: etcd.leader(f"put{run}"), 10, "nobody elected")
                        wait_until(lambda: subprocess.run(
                            [LOADGEN, f"--addr={addr}", "--keys=1", "--ops=1",
                             "--concurrency=1", "--progress=false"],
                            capture_output=True).returncode == 0, 10, "no writes")
                    out["put"][name].append(put_run(addr, proc.pid))
                finally:
                    stop(proc)
    finally:
        etcd.kill()
    return out


def print_failover(results):
    print(f"\n### Failover: {ROUNDS} kill -9 rounds each, 3 servers, 2 writers, every write "
          f"waiting for 1 replica\n")
    print("| system | kill -9 to the first acknowledged write, s: median (min .. max) | "
          "acknowledged writes | lost |")
    print("|---|---|---|---|")
    for name, label in (("ringkv", f"ringkv, etcd lease {TTL_S} s, --min-replicas=1"),
                        ("ringkv-isr", f"ringkv, etcd lease {TTL_S} s, --min-replicas=1 "
                                       "--acks=isr"),
                        ("redis", f"Redis Sentinel, down-after {TTL_S} s, WAIT 1")):
        r = results[name]
        print(f"| {label} | {cell(r['times'], '{:.2f}')} | {r['acked']:,} | {r['lost']:,} |")


def print_switchover(results):
    print(f"\n### Planned failover: {SWITCH_ROUNDS} rounds each, 3 servers, 2 writers, every "
          "write waiting for 1 replica\n")
    print("| system | writes paused, s: median (min .. max) | the command's own figure, s | "
          "acknowledged writes | lost |")
    print("|---|---|---|---|---|")
    for name, label in (("ringkv-switch", "ringkv `failover --to`, --min-replicas=1 --acks=isr"),
                        ("redis-switch", "Redis `SENTINEL FAILOVER`, WAIT 1")):
        r = results[name]
        said = cell(r["reported"], "{:.3f}") if r.get("reported") else "-"
        print(f"| {label} | {cell(r['times'], '{:.3f}')} | {said} | {r['acked']:,} | "
              f"{r['lost']:,} |")


def resync(work, grpc, pb, stubs):
    """Part resync: the --acks=isr rounds with PRELOAD keys, on this build and OLD_SERVER."""
    out = {}
    for name, server in (("this", SERVER), ("old", OLD_SERVER)):
        if server:
            sub = os.path.join(work, name)
            os.makedirs(sub)
            out[name] = ringkv_rounds(sub, grpc, pb, stubs, ["--acks=isr"], server=server,
                                      rounds=RESYNC_ROUNDS, preload=PRELOAD)
    return out


def print_resync(r):
    print(f"\n### Failover with {PRELOAD:,} keys: {RESYNC_ROUNDS} kill -9 rounds each, 3 servers, "
          f"--min-replicas=1 --acks=isr, etcd lease {TTL_S} s\n")
    print("| server | kill -9 to the first acknowledged write, s: median (min .. max) | "
          "flows resumed from their positions | acknowledged writes | lost |")
    print("|---|---|---|---|---|")
    for name, label in (("this", "this build"), ("old", f"`{OLD_SERVER}`")):
        if name in r:
            x = r[name]
            print(f"| {label} | {cell(x['times'], '{:.2f}')} | {x['resumed']} | "
                  f"{x['acked']:,} | {x['lost']:,} |")


def print_steady(r):
    print(f"\n### Idle, {IDLE_S} s: CPU, % of a core\n")
    print("| setup | primary | replica | etcd |")
    print("|---|---|---|---|")
    for name, label in (("alone", "primary + replica (--replica-of), no group"),
                        ("group", "primary + replica in a group on etcd")):
        i = r["idle"][name]
        print(f"| {label} | {i['primary']:.2f} | {i['replica']:.2f} | "
              f"{i['etcd']:.2f} |")
    print(f"\n### PUT, 50 connections x 1 call, {SECONDS} s x {RUNS} runs: median (min .. max)\n")
    print("| server | PUT/s | server µs/op | client µs/op |")
    print("|---|---|---|---|")
    for name, label in (("alone", "a primary, no group"), ("group", "the primary of a group")):
        rs = r["put"][name]
        print(f"| {label} | {cell([x['ops_per_s'] for x in rs])} | "
              f"{cell([x['server_us_per_op'] for x in rs], '{:.1f}')} | "
              f"{cell([x['client_us_per_op'] for x in rs], '{:.1f}')} |")


def print_acks(r):
    print(f"\n### PUT on a group of three (two replicas), --min-replicas=1, 50 connections x 1 "
          f"call, {SECONDS} s x {RUNS} runs: median (min .. max)\n")
    print("| writes wait for | PUT/s | primary µs/op | client µs/op | errors |")
    print("|---|---|---|---|---|")
    for name, label in (("count", "any one replica (--acks=count)"),
                        ("isr", "both, the in-sync set (--acks=isr)")):
        rs = r[name]
        print(f"| {label} | {cell([x['ops_per_s'] for x in rs])} | "
              f"{cell([x['server_us_per_op'] for x in rs], '{:.1f}')} | "
              f"{cell([x['client_us_per_op'] for x in rs], '{:.1f}')} | "
              f"{sum(x['errors'] for x in rs)} |")


def main():
    run_under_venv()
    python_stubs.generate("proto")
    import grpc
    from ringkv.v1 import kv_pb2 as pb, kv_pb2_grpc as stubs
    os.makedirs(OUT, exist_ok=True)
    runs = []
    if "failover" in PARTS:
        runs += [("ringkv", lambda w: ringkv_rounds(w, grpc, pb, stubs)),
                 ("ringkv-isr", lambda w: ringkv_rounds(w, grpc, pb, stubs, ["--acks=isr"])),
                 ("redis", redis_rounds)]
    if "steady" in PARTS:
        runs.append(("steady", lambda w: steady(w, grpc, pb, stubs)))
    if "acks" in PARTS:
        runs.append(("acks", lambda w: acks_cost(w, grpc, pb, stubs)))
    if "resync" in PARTS:
        runs.append(("resync", lambda w: resync(w, grpc, pb, stubs)))
    if "switchover" in PARTS:
        runs += [("ringkv-switch", lambda w: ringkv_rounds(w, grpc, pb, stubs, ["--acks=isr"],
                                                           rounds=SWITCH_ROUNDS, switch=True)),
                 ("redis-switch", lambda w: redis_rounds(w, switch=True))]
    results = {}
    for name, run in runs:
        work = tempfile.mkdtemp(prefix=f"ringkv-failover-{name}-")
        try:
            results[name] = run(work)
        finally:
            shutil.rmtree(work, True)
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            json.dump(results[name], f)
    print(f"{machine()}")
    if "failover" in PARTS:
        print_failover(results)
    if "steady" in PARTS:
        print_steady(results["steady"])
    if "acks" in PARTS:
        print_acks(results["acks"])
    if "resync" in PARTS:
        print_resync(results["resync"])
    if "switchover" in PARTS:
        print_switchover(results)


if __name__ == "__main__":
    main()
