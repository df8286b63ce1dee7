"""What the benchmark scripts share: free ports, a server's CPU from /proc, running a client
while accounting for its CPU and the server's, starting and stopping servers, and table cells.
"""
import os
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_times(pid):
    """(user, system) CPU seconds of a running process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / HZ, int(fields[12]) / HZ  # utime, stime.


def cpu_seconds(pid):
    return sum(cpu_times(pid))


def rss_bytes(pid):
    """A running process's resident memory, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read())[1]) * 1024


class Cpu:
    """The CPU seconds a client run cost: the client's and the server's, user and system."""

    def __init__(self, client_user, client_sys, server_user, server_sys):
        self.client_user, self.client_sys = client_user, client_sys
        self.server_user, self.server_sys = server_user, server_sys

    def per_op(self, ops):
        return {"server_us_per_op": (self.server_user + self.server_sys) * 1e6 / ops,
                "server_sys_us_per_op": self.server_sys * 1e6 / ops,
                "client_us_per_op": (self.client_user + self.client_sys) * 1e6 / ops,
                "client_sys_us_per_op": self.client_sys * 1e6 / ops}


def run_client(cmd, server_pid, timeout, during=None):
    """Runs a client to completion: (stdout, Cpu). Clients run one at a time, so the growth of
    the children's rusage over the run is this client's own CPU. `during`, if given, is called
    about once a second while the client runs."""
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    server0 = cpu_times(server_pid)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + timeout
    try:
        while during is not None and proc.poll() is None and time.monotonic() < deadline:
            during()
            time.sleep(1)
        out, _ = proc.communicate(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd, out)
    server1 = cpu_times(server_pid)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, Cpu(children.ru_utime - children0.ru_utime,
                    children.ru_stime - children0.ru_stime,
                    server1[0] - server0[0], server1[1] - server0[1])


def start_ringkv(log, flags=(), binary="build/server/ringkv-server", env=None):
    """A ringkv-server on a free loopback port, stderr to `log`: (process, "127.0.0.1:PORT").
    `env`: its environment, if not this one."""
    with open(log, "w") as err:
        proc = subprocess.Popen([binary, "--listen=127.0.0.1:0", *flags], stderr=err, env=env)
    for _ in range(200):
        with open(log) as f:
            m = re.search(r"listening on \S+:(\d+)", f.read())
        if m:
            return proc, f"127.0.0.1:{m.group(1)}"
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"the server did not start: {open(log).read()}")


def start_redis(log, flags=()):
    """A redis-server on a free loopback port, persisting nothing: (process, port)."""
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--daemonize", "no",
                             "--logfile", log, *flags])
    for _ in range(100):
        if subprocess.run(["redis-cli", "-p", str(port), "ping"],
                          capture_output=True).returncode == 0:
            return proc, port
        time.sleep(0.05)
    stop(proc)
    raise RuntimeError(f"redis-server did not start: {open(log).read()}")


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)


def machine():
    """The CPU model and the core count, for the line every table starts with."""
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "?")
    return f"{cpu}, {os.cpu_count()} cores"


def cell(values, fmt="{:,.0f}"):
    """Median (min .. max), or - for none."""
    if not values:
        return "-"
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))} .. " \
           f"{fmt.format(max(values))})"


def run_under_venv():
    """Re-runs this script under .tools/venv (grpcio), unless it already runs there."""
    venv = os.path.join(".tools", "venv")
    if os.path.realpath(sys.prefix) != os.path.realpath(venv):
        python = os.path.join(venv, "bin", "python3")
        if not os.path.exists(python):
            sys.exit("grpcio missing under .tools/venv: run scripts/setup.sh")
        os.execv(python, [python, *sys.argv])
