"""A writer a test can run in another network namespace (ip netns exec) and still time on its
own clock: puts KEY_PREFIX1, KEY_PREFIX2, ... to ADDRESS through grpcio, one at a time, until
its stdin closes, and prints `KEY BEGAN ARRIVED` for each acknowledged put (time.monotonic(),
the machine's CLOCK_MONOTONIC, which every namespace shares), as the answer arrives.

    python3 put_loop.py ADDRESS KEY_PREFIX STUBS_DIR   # STUBS_DIR: python_stubs.generate's
"""
import sys
import threading
import time


def main():
    address, prefix, stubs = sys.argv[1:4]
    sys.path.insert(0, stubs)
    import grpc
    from ringkv.v1 import kv_pb2, kv_pb2_grpc
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    with grpc.insecure_channel(address) as channel:
        kv = kv_pb2_grpc.KVStub(channel)
        n = 0
        while not stop.is_set():
            n += 1
            key = f"{prefix}{n}"
            began = time.monotonic()
            try:
                kv.Put(kv_pb2.PutRequest(key=key.encode(), value=b"v"), timeout=1)
            except grpc.RpcError:
                time.sleep(0.01)
                continue
            print(key, began, time.monotonic(), flush=True)


if __name__ == "__main__":
    main()
