"""A real c10d TCPStore, hosted by a given interpreter's torch, on a free port of 127.0.0.1."""
import subprocess

from ports import free_port

_SERVE = """
import datetime, sys, time
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 1, True,
                      timeout=datetime.timedelta(seconds=600))
print("up", flush=True)
sys.stdin.read()
"""


class TorchStore:
    """`python` hosts a TCPStore until close(); the port is free until the store takes it."""

    def __init__(self, python):
        self.port = free_port()
        self.proc = subprocess.Popen([python, "-c", _SERVE, str(self.port)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if line != "up\n":
            self.close()
            raise RuntimeError(f"the TCPStore of {python} did not start (exit {self.proc.poll()})")

    def close(self):
        self.proc.kill()
        self.proc.wait()
