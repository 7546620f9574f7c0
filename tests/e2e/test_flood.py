"""A flood of unauthenticated connections to the rendezvous while a job forms and runs: the node
that hosts it keeps the descriptors its workers need, whatever its descriptor limit."""
import os
import resource
import shutil
import socket
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from agents import Agent  # noqa: E402
from conftest import TRAINRUN, wait_for  # noqa: E402
from ports import free_port  # noqa: E402


class Flood(threading.Thread):
    """Opens connections to 127.0.0.1:`port` at `rate` a second and holds them open, sending
    nothing, as a scanner or a misconfigured client would: at most `limit` connections and
    `duration` seconds."""

    def __init__(self, port, rate=150, limit=3000, duration=60):
        super().__init__(daemon=True)
        self.port, self.rate, self.limit, self.duration = port, rate, limit, duration
        self.made = 0
        self.sockets = []
        self.done = threading.Event()

    def run(self):
        end = time.monotonic() + self.duration
        while not self.done.is_set() and self.made < self.limit and time.monotonic() < end:
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", self.port))
            self.sockets.append(s)
            self.made += 1
            self.done.wait(1 / self.rate)

    def stop(self):
        self.done.set()
        self.join(10)
        for s in self.sockets:
            s.close()


# Each worker writes its descriptor limit, then runs long enough to overlap the flood.
LIMIT_WORKER = """
import os, resource, sys, time
with open(os.path.join(sys.argv[1], os.environ["RANK"]), "w") as f:
    f.write("%d %d" % resource.getrlimit(resource.RLIMIT_NOFILE))
time.sleep(2)
"""


def soft_and_hard(kind):
    """The --nofile value for prlimit: a soft limit of 1,024 under this machine's hard limit, or
    1,024 for both."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if kind == "hard-1024":
        return 1024, 1024
    if hard != resource.RLIM_INFINITY and hard <= 1024:
        pytest.skip(f"the hard descriptor limit here is {hard}: cannot test a higher one")
    return 1024, hard


def max_open_files(pid):
    with open(f"/proc/{pid}/limits") as f:
        line = next(line for line in f if line.startswith("Max open files"))
    return line.split()[3:5]


@pytest.mark.parametrize("kind", ["soft-1024", "hard-1024"])
def test_connection_flood_during_a_two_agent_job_under_a_1024_descriptor_limit(tmp_path, kind):
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        pytest.skip("prlimit (util-linux) is not installed")
    soft, hard = soft_and_hard(kind)
    # The flood's own descriptors.
    ours = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4096 if ours[1] == resource.RLIM_INFINITY else min(4096, ours[1])
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(ours[0], want), ours[1]))
    script = tmp_path / "limits.py"
    script.write_text(LIMIT_WORKER)
    out = tmp_path / "limits"
    out.mkdir()
    port = free_port()
    args = ["--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=flood", str(script), str(out)]
    hard_text = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)

    def agent(name, extra):
        return Agent(tmp_path, name, [prlimit, f"--nofile={soft}:{hard_text}", TRAINRUN,
                                      *args[:4], extra, *args[4:]])

    flood = Flood(port, limit=want - 200)
    host = other = None
    try:
        host = agent("host", "--rdzv-conf=is_host=1")
        assert wait_for(lambda: os.path.exists(f"/proc/{host.proc.pid}/limits") and
                        max_open_files(host.proc.pid)[0] == hard_text, 10), host.err
        # More strangers than the soft limit has descriptors before the second node comes.
        flood.start()
        assert wait_for(lambda: flood.made >= 1100 or not flood.is_alive(), 60)
        other = agent("other", "--rdzv-conf=is_host=0")
        assert other.wait(90) == 0, other.err
        assert host.wait(90) == 0, host.err
    finally:
        flood.stop()
        for a in (host, other):
            if a is not None:
                a.kill()
    assert "Too many open files" not in host.err
    # The workers got the soft limit the user set, not the one trainrun raised for itself.
    limits = {name: (out / name).read_text() for name in os.listdir(out)}
    assert sorted(limits) == ["0", "1", "2", "3"]
    assert set(limits.values()) == {f"{soft} {hard}" if hard != resource.RLIM_INFINITY
                                    else f"{soft} {resource.RLIM_INFINITY}"}
