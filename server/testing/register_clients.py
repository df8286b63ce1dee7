"""Clients for linearizability tests (issue 23): threads that run puts, linearizable gets and
compare-and-sets on a few keys through grpcio, and record each call's invocation, completion
and outcome for linearizability.py.

    clients = RegisterClients(grpc, kv_pb2, kv_pb2_grpc, addresses, keys=["k0", "k1"])
    clients.stop()
    clients.history        # [(key, Op)], for linearizability.check_history
    clients.inconsistent_versions()

Every put writes a value of its own, so that a version read names one write: a
compare-and-set on the version a client last read of a key is recorded as one on the value it
read with it. Outcomes:
  - OK, NOT_FOUND (a get of an absent key), and a failed condition (FAILED_PRECONDITION) are
    known, and recorded;
  - a refusal that ran nothing, which the server marks with a ringkv.v1.Redirect detail (a
    replica, a fenced or unelected server, too few replicas, a linearizable read on a server
    that may not give one, a server shutting down), is left out, and the client moves to the
    next address;
  - anything else (a timeout, a lost connection, a write run but not replicated in time) leaves
    a write's outcome unknown (recorded without a completion: it may or may not have taken
    effect) and a read's unrecorded.
"""
import random
import threading
import time

from linearizability import Op

REDIRECT = "type.googleapis.com/ringkv.v1.Redirect"
CONSISTENCY = (("ringkv-consistency", "linearizable"),)
CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 50),
                   ("grpc.min_reconnect_backoff_ms", 50),
                   ("grpc.max_reconnect_backoff_ms", 100)]


class RegisterClients:
    def __init__(self, grpc, kv_pb2, kv_pb2_grpc, addresses, keys, count=4, call_timeout=0.5,
                 seed=1):
        self.grpc, self.kv_pb2, self.kv_pb2_grpc = grpc, kv_pb2, kv_pb2_grpc
        self.keys = [k.encode() for k in keys]
        self.call_timeout = call_timeout
        self.history = []
        self.versions = {}  # (key, value) -> the versions seen with it.
        self.counts = {"ok": 0, "unknown": 0, "not_run": 0}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i, list(addresses), seed + i))
                        for i in range(count)]
        for t in self.threads:
            t.start()

    def run(self, client, addresses, seed):
        rng = random.Random(seed)
        channels = [self.grpc.insecure_channel(a, options=CHANNEL_OPTIONS) for a in addresses]
        stubs = [self.kv_pb2_grpc.KVStub(c) for c in channels]
        last_read = {}  # key -> (value or None, version): what this client read last.
        at, n = 0, 0
        while not self.stopping.is_set():
            key = rng.choice(self.keys)
            kind = rng.choice(("put", "get", "get", "cas"))
            if kind == "cas" and key not in last_read:
                kind = "get"
            value = f"c{client}-{n}".encode()
            n += 1
            kv = stubs[at]
            call = time.monotonic()
            try:
                if kind == "put":
                    r = kv.Put(self.kv_pb2.PutRequest(key=key, value=value),
                               timeout=self.call_timeout)
                    op = Op(client, "put", value=value)
                    self.saw(key, value, r.version)
                elif kind == "get":
                    r = kv.Get(self.kv_pb2.GetRequest(key=key), timeout=self.call_timeout,
                               metadata=CONSISTENCY)
                    op = Op(client, "get", result=r.value)
                    last_read[key] = (r.value, r.version)
                    self.saw(key, r.value, r.version)
                else:
                    expect, version = last_read.pop(key)
                    r = kv.Put(self.kv_pb2.PutRequest(
                        key=key, value=value,
                        condition=self.kv_pb2.Condition(version=version)),
                        timeout=self.call_timeout)
                    op = Op(client, "cas", value=value, expect=expect, ok=True)
                    self.saw(key, value, r.version)
                self.record(key, op._replace(call=call, ret=time.monotonic()), "ok")
                continue
            except self.grpc.RpcError as e:
                ret = time.monotonic()
                code, details, not_run = e.code(), e.details() or "", self.not_run(e)
            if kind == "get" and code == self.grpc.StatusCode.NOT_FOUND:
                last_read[key] = (None, 0)
                self.record(key, Op(client, "get", result=None, call=call, ret=ret), "ok")
                continue
            if (kind == "cas" and code == self.grpc.StatusCode.FAILED_PRECONDITION
                    and "condition failed" in details):
                self.record(key, Op(client, "cas", value=value, expect=expect, ok=False,
                                    call=call, ret=ret), "ok")
                continue
            at = (at + 1) % len(stubs)
            if not_run:
                self.record(key, None, "not_run")
            elif kind == "get":
                self.record(key, None, "unknown")
            else:  # The write may or may not have been made.
                op = (Op(client, "put", value=value) if kind == "put" else
                      Op(client, "cas", value=value, expect=expect, ok=True))
                self.record(key, op._replace(call=call, ret=None), "unknown")
            time.sleep(0.005)
        for c in channels:
            c.close()

    def not_run(self, error):
        """Whether a refusal says that nothing ran: it carries a Redirect detail."""
        details = dict(error.trailing_metadata() or ()).get("grpc-status-details-bin")
        if not details:
            return False
        status = self.kv_pb2.RpcStatus.FromString(details)
        return any(d.type_url == REDIRECT for d in status.details)

    def saw(self, key, value, version):
        with self.lock:
            self.versions.setdefault((key, value), set()).add(version)

    def record(self, key, op, outcome):
        with self.lock:
            self.counts[outcome] += 1
            if op is not None:
                self.history.append((key, op))

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join()

    def inconsistent_versions(self):
        """Values seen with more than one version: each write has one."""
        with self.lock:
            return {k: v for k, v in self.versions.items() if len(v) > 1}

    def completed_after(self, t):
        with self.lock:
            return [op for _, op in self.history if op.ret is not None and op.ret > t]
