"""Ports for tests that run servers on this machine."""
import random
import socket


def free_port():
    """A port that is free now and outside the kernel's ephemeral range, so that no other
    process's outgoing connection or bind(0) can take it before the test binds it."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = (int(x) for x in f.read().split())
    candidates = [p for p in range(20000, 65535) if not low <= p <= high]
    for port in random.sample(candidates, len(candidates)):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port outside the ephemeral range")
