"""A real etcd (Debian's etcd-server) on loopback for the Python tests, with a data directory
of its own; start() again restarts it on the same directory and ports.

    etcd = Etcd(work_dir)
    etcd.start()                  # waits until it answers
    etcd.endpoint                 # "127.0.0.1:PORT"
    etcd.leader(group)            # (term, server_id, address) of the group's leader key, or None
    etcd.kill()                   # SIGKILL
"""
import os
import socket
import subprocess
import time

ETCDCTL_ENV = {**os.environ, "ETCDCTL_API": "3"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Etcd:
    def __init__(self, work, certs=None, host="127.0.0.1"):
        """`certs`: a directory of server/testing/certs.py's certificates: clients then reach
        etcd over TLS only, with a client certificate of its CA (--client-cert-auth). `host`:
        the address it listens on for clients."""
        self.dir = os.path.join(work, "etcd")
        self.port, self.peer = free_port(), free_port()
        self.endpoint = f"{host}:{self.port}"
        self.certs = certs
        self.process = None

    def tls_flags(self, names):
        """Flags naming the certificates ((flag, file) pairs), or none without TLS."""
        return [f"{flag}={os.path.join(self.certs, name)}" for flag, name in names] \
            if self.certs else []

    def start(self):
        scheme = "https" if self.certs else "http"
        client, peer = f"{scheme}://{self.endpoint}", f"http://127.0.0.1:{self.peer}"
        self.process = subprocess.Popen(
            ["etcd", "--name=ringkv-test", f"--data-dir={self.dir}",
             f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
             f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
             f"--initial-cluster=ringkv-test={peer}", "--logger=zap",
             f"--log-outputs={self.dir}.log",
             *self.tls_flags((("--cert-file", "server.pem"), ("--key-file", "server.key"),
                              ("--trusted-ca-file", "ca.pem"))),
             *(["--client-cert-auth"] if self.certs else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while not self.answers():
            if time.time() > deadline:
                raise AssertionError(f"etcd on {self.endpoint} never answered")
            time.sleep(0.05)

    def etcdctl(self, *args):
        return subprocess.run(["etcdctl", f"--endpoints={self.endpoint}",
                               *self.tls_flags((("--cacert", "ca.pem"), ("--cert", "client.pem"),
                                                ("--key", "client.key"))), *args],
                              capture_output=True, text=True, env=ETCDCTL_ENV, timeout=10)

    def answers(self):
        return self.etcdctl("get", "x").returncode == 0

    def leader(self, group):
        """The group's leader key (cluster/membership.h): (term, server id, address), or None."""
        r = self.etcdctl("get", "--print-value-only", f"/ringkv/{group}/leader")
        if r.returncode != 0 or not r.stdout.strip():
            return None
        term, server_id, address = r.stdout.split()
        return int(term), server_id, address

    def kill(self):
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
