"""Ports for tests that run servers on this machine."""
import fcntl
import os
import random
import socket

# Ports this process has taken, each with its lock held until the process ends: test processes
# running at once (ctest -j, or two test suites on one machine) never hand out the same port,
# even after the socket that found it free is closed.
# The lock directory is the machine's, not the test run's TMPDIR (scripts/test.sh gives each run
# its own): suites of different checkouts running at once share the machine's ports.
_LOCKS = "/tmp/trainrun-test-ports"
_taken = {}


def _reserve(port):
    os.makedirs(_LOCKS, exist_ok=True)
    fd = os.open(os.path.join(_LOCKS, str(port)), os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _taken[port] = fd
    return True


def _bindable(host, port):
    with socket.socket() as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def held_port(host="127.0.0.1"):
    """A socket bound to a port outside the kernel's ephemeral range, so that no other process's
    outgoing connection or bind(0) can take it, and that no other test process hands out while
    this one runs; the caller listens on it or not, and closes it."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = (int(x) for x in f.read().split())
    # The port after it is taken too: a static multi-node job's rendezvous listens on
    # MASTER_PORT + 1, and another test handed that port would see its own server refused.
    candidates = [p for p in range(20000, 65534)
                  if not low <= p <= high and not low <= p + 1 <= high]
    for port in random.sample(candidates, len(candidates)):
        if port in _taken or port + 1 in _taken or not _reserve(port):
            continue
        if not _reserve(port + 1):
            continue
        if not _bindable(host, port + 1):
            continue
        s = socket.socket()
        try:
            s.bind((host, port))
        except OSError:
            s.close()
            continue
        return s
    raise RuntimeError("no free port outside the ephemeral range")


def free_port():
    """A port that is free now and outside the ephemeral range, for a server the test starts."""
    with held_port() as s:
        return s.getsockname()[1]


def standalone_args():
    """torchrun's --standalone on a free port: torchrun 1.13's --standalone always takes
    localhost:29400, so two at once (tests run in parallel) join each other's rendezvous."""
    import uuid
    return ["--rdzv_backend=c10d", f"--rdzv_endpoint=localhost:{free_port()}",
            f"--rdzv_id={uuid.uuid4()}", "--nnodes=1"]
