"""A real ringkv-server child process on a free loopback port, for the Python tests.

    server = RingkvServer(binary, "--threads=2")   # waits for its "listening on" line;
                                                   # keyword arguments go to subprocess.Popen
    server.address                                 # "127.0.0.1:PORT"
    log = LogReader(server)                        # drains its stderr from then on
    log.wait_for(r"metrics on http://\S+:(\d+)")   # the first line matching, or AssertionError
    sigstop(server.process.pid)                    # SIGSTOP, once every thread has stopped
    os.kill(server.process.pid, signal.SIGCONT)    # and on again
    server.stop()                                  # SIGTERM; asserts exit status 0
"""
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

# How long a stop may take: a sanitizer build is several times slower, and CI runs two tests
# at once on two cores.
STOP_S = 10 if os.environ.get("RINGKV_SANITIZER", "none") in ("", "none") else 30


def thread_stacks(pid):
    """Every thread's stack of the live process `pid` (gdb), for a failure message."""
    if shutil.which("gdb") is None:
        return "(no gdb to show the threads' stacks)"
    try:
        out = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 15"],
                             capture_output=True, text=True, timeout=60).stdout
    except subprocess.TimeoutExpired:
        return "(gdb took over 60 s)"
    # gRPC's and Abseil's own threads, idle in their pollers and timers, first: a test log
    # keeps the end of a long message, where the server's own threads then are.
    threads, current = [], None
    for line in out.splitlines():
        if line.startswith("Thread"):
            current = [line]
            threads.append(current)
        elif line.startswith("#") and current is not None:
            current.append(line)
    library = ('"event_engine"', '"timer_manager"', '"grpc_global_tim"', '"default-executo"',
               '"resolver-execut"', '"grpcpp_sync_ser"')
    threads.sort(key=lambda lines: not any(name in lines[0] for name in library))
    return "\n".join(line for lines in threads for line in lines)


def sigstop(pid, timeout=5.0):
    """SIGSTOP to `pid`, returning once every thread of it has stopped. kill() returns once the
    signal is queued; until the thread that takes it runs, the others go on (a stopped replica
    could still receive, apply and acknowledge a write sent after the kill)."""
    os.kill(pid, signal.SIGSTOP)
    task = f"/proc/{pid}/task"
    deadline = time.monotonic() + timeout
    while True:
        try:
            states = [Path(f"{task}/{t}/stat").read_text().rsplit(")", 1)[1].split()[0]
                      for t in os.listdir(task)]
        except FileNotFoundError:  # A thread ended while we looked: look again.
            states = None
        # T: stopped; Z and X: a thread that is ending, which runs no more.
        if states is not None and all(state in "TtZX" for state in states):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} did not stop within {timeout} s of SIGSTOP; "
                                 f"its threads' states: {states}")
        time.sleep(0.001)


class RingkvServer:
    def __init__(self, binary, *args, host="127.0.0.1", prefix=(), **popen_args):
        """`host`: the address to listen on; `prefix`: a command to run it under (for example
        `ip netns exec NAME`, which execs it: the process is the server's)."""
        self.process = subprocess.Popen([*prefix, binary, f"--listen={host}:0", *args],
                                        stderr=subprocess.PIPE, text=True, **popen_args)
        deadline = time.time() + 20
        self.address = None
        self.startup = []  # Its log up to the "listening on" line.
        while time.time() < deadline and self.address is None:
            line = self.process.stderr.readline()
            if not line and self.process.poll() is not None:
                break
            self.startup.append(line)
            m = re.search(r"listening on \S+:(\d+)", line)
            if m:
                self.address = f"{host}:{m.group(1)}"
        if self.address is None:
            self.process.kill()
            raise RuntimeError("ringkv-server printed no port")

    def stop(self):
        if self.process.stderr.closed:
            return  # Stopped before (and said so then, if it failed).
        self.process.send_signal(signal.SIGTERM)
        try:
            status = self.process.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            stacks = thread_stacks(self.process.pid)
            # Never leave it running: it holds the test runner's output pipe.
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"ringkv-server did not stop within {STOP_S} s of SIGTERM; "
                                 f"its threads then:\n{stacks[-12000:]}")
        else:
            if status != 0:  # Say why: the end of its log (a sanitizer's report goes there).
                try:
                    tail = self.process.stderr.read()[-6000:]
                except (ValueError, OSError):  # Closed by a LogReader, which read it (a
                    tail = "(its log was read elsewhere)"  # live one leaves this empty).
                raise AssertionError(f"ringkv-server exited {status} after SIGTERM; "
                                     f"the end of its log:\n{tail}")
        finally:
            self.process.stderr.close()


class LogReader:
    """Drains a server's stderr into a list, so that a chatty log never blocks it."""

    def __init__(self, server):
        self.lines = []
        self.thread = threading.Thread(target=self._drain, args=(server.process.stderr,),
                                       daemon=True)
        self.thread.start()

    def _drain(self, pipe):
        try:
            for line in pipe:
                self.lines.append(line)
        except ValueError:  # The pipe was closed by RingkvServer.stop.
            pass

    def wait_for(self, pattern, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for line in list(self.lines):
                if re.search(pattern, line):
                    return line
            time.sleep(0.05)
        raise AssertionError(f"no log line matching {pattern!r} in {self.lines}")
