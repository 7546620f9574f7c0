"""Shared helpers for the end-to-end tests: they run the real trainrun binary."""
import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ports import free_port  # noqa: E402,F401  (re-exported to the tests)

TRAINRUN = os.environ.get("TRAINRUN_BIN", "")
WORKER = os.environ.get("TEST_WORKER_BIN", "")


def pytest_configure(config):
    if not TRAINRUN or not os.access(TRAINRUN, os.X_OK):
        raise pytest.UsageError("set TRAINRUN_BIN to the built trainrun binary (ctest does)")


def run(args, timeout=60, env=None, **kw):
    """Runs trainrun with `args`; returns the CompletedProcess (text output)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([TRAINRUN] + list(args), capture_output=True, text=True,
                          timeout=timeout, env=full_env, **kw)


def start(args, env=None, **kw):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.Popen([TRAINRUN] + list(args), env=full_env, **kw)


def alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def read_pids(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [int(x) for x in f.read().split()]


def wait_for(predicate, timeout=10.0, interval=0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def wait_for_pids(path, count, timeout=10.0):
    assert wait_for(lambda: len(read_pids(path)) >= count, timeout), \
        f"expected {count} pids in {path}, got {read_pids(path)}"
    return read_pids(path)


class Agent:
    """One trainrun process whose output goes to files, so that many can run at once.
    `prefix` wraps the command (for example `ip netns exec NS`)."""

    def __init__(self, tmp_path, name, args, env=None, prefix=()):
        self.name = name
        self.out_path = tmp_path / f"{name}.out"
        self.err_path = tmp_path / f"{name}.err"
        full_env = dict(os.environ, **(env or {}))
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen([*prefix, TRAINRUN, *args], env=full_env, stdout=out,
                                         stderr=err)

    def wait(self, timeout=90):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"agent {self.name} still running after {timeout} s:\n{self.err}")

    @property
    def out(self):
        return self.out_path.read_text()

    @property
    def err(self):
        return self.err_path.read_text()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def agents(tmp_path):
    """A factory of Agents; whatever is still running at the end of the test is killed."""
    started = []

    def make(name, args, env=None, prefix=()):
        a = Agent(tmp_path, name, args, env, prefix)
        started.append(a)
        return a

    yield make
    for a in started:
        a.kill()


def read_envs(directory):
    """The environments that test_worker's `env` action wrote, by RANK."""
    envs = {}
    for name in os.listdir(directory):
        with open(os.path.join(directory, name)) as f:
            env = dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)
        envs[int(env["RANK"])] = env
    return envs


@pytest.fixture
def worker():
    assert WORKER and os.access(WORKER, os.X_OK), "set TEST_WORKER_BIN (ctest does)"
    return WORKER


@pytest.fixture(autouse=True)
def _no_leftovers():
    """Every test must leave no process of its own behind."""
    yield
    me = os.getpid()
    leftovers = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            leftovers.append(int(entry))
    for pid in leftovers:
        os.kill(pid, signal.SIGKILL)
    assert not leftovers, f"processes left running: {leftovers}"
