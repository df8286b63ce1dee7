"""Writers for failover tests and benchmarks (issue 23): threads that put unique keys without
pause through grpcio and keep every acknowledgement, so that lost acknowledged writes can be
counted and the time to the first acknowledgement after a failure measured.

    writers = Writers(grpc, kv_pb2, kv_pb2_grpc, ["127.0.0.1:5001", "127.0.0.1:5002"])
    writers.acks_after(t, address)   # acknowledgements received after monotonic time t
    writers.stop()
    writers.acked                    # key -> (value, address, monotonic time, version)

A writer sends to the address that last acknowledged and moves to the next on any error;
`pinned` writers (one per address given) never move. A key is never sent twice: a failed put
may or may not have been applied.
"""
import threading
import time

# Channels retry a dead address quickly: a restarted server is reached again at once.
CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 50),
                   ("grpc.min_reconnect_backoff_ms", 50),
                   ("grpc.max_reconnect_backoff_ms", 100)]


class Writers:
    def __init__(self, grpc, kv_pb2, kv_pb2_grpc, addresses, count=2, pinned=(),
                 call_timeout=0.5):
        self.grpc, self.kv_pb2, self.kv_pb2_grpc = grpc, kv_pb2, kv_pb2_grpc
        self.call_timeout = call_timeout
        self.acked = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(f"w{i}-", list(addresses)))
                        for i in range(count)]
        self.threads += [threading.Thread(target=self.run, args=(f"p{i}-", [a]))
                         for i, a in enumerate(pinned)]
        for t in self.threads:
            t.start()

    def run(self, prefix, addresses):
        channels = [self.grpc.insecure_channel(a, options=CHANNEL_OPTIONS) for a in addresses]
        stubs = [self.kv_pb2_grpc.KVStub(c) for c in channels]
        at, n = 0, 0
        while not self.stopping.is_set():
            key, value = f"{prefix}{n}".encode(), f"v{n}".encode()
            n += 1
            try:
                r = stubs[at].Put(self.kv_pb2.PutRequest(key=key, value=value),
                                  timeout=self.call_timeout)
            except self.grpc.RpcError:
                at = (at + 1) % len(stubs)
                time.sleep(0.005)
                continue
            with self.lock:
                self.acked[key] = (value, addresses[at], time.monotonic(), r.version)
        for c in channels:
            c.close()

    def acks_after(self, t, address=None):
        with self.lock:
            return [a for a in self.acked.values() if a[2] > t and address in (None, a[1])]

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join()

    def lost_on(self, address, keys=None):
        """The acknowledged keys (all, or `keys`) that the server at `address` does not hold
        with their acknowledged value."""
        keys = sorted(self.acked if keys is None else keys)
        lost = []
        with self.grpc.insecure_channel(address) as channel:
            kv = self.kv_pb2_grpc.KVStub(channel)
            for i in range(0, len(keys), 500):
                batch = keys[i:i + 500]
                got = kv.MultiGet(self.kv_pb2.MultiGetRequest(keys=batch), timeout=30).results
                lost += [k for k, r in zip(batch, got)
                         if r.code != 0 or r.value != self.acked[k][0]]
        return lost
