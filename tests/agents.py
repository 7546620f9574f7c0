"""Several trainrun agents at once, each a process of its own, for the tests where they form one
job. Their output goes to files, so that none blocks on a pipe nobody reads."""
import os
import shutil
import subprocess


def ip_binary():
    """iproute2's `ip`, also where sbin is not on PATH; None where it is not installed."""
    return shutil.which("ip") or next(
        (p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip") if os.access(p, os.X_OK)), None)


class Agent:
    """One trainrun process; `prefix` wraps the command (for example `ip netns exec NS`)."""

    def __init__(self, directory, name, command, env=None, prefix=(), cwd=None):
        self.name = name
        self.out_path = directory / f"{name}.out"
        self.err_path = directory / f"{name}.err"
        full_env = dict(os.environ, **(env or {}))
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen([*prefix, *command], env=full_env, stdout=out, stderr=err,
                                         cwd=cwd)

    def wait(self, timeout=90):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"agent {self.name} still running after {timeout} s:\n{self.err}")

    # A worker's bytes that are not UTF-8 reach the output as they are.
    @property
    def out(self):
        return self.out_path.read_text(errors="replace")

    @property
    def err(self):
        return self.err_path.read_text(errors="replace")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Agents:
    """Starts the agents of one test: agents(name, args, env=None, netns=None, cwd=None, wrap=())
    runs `trainrun ARGS` (inside network namespace `netns` if given, through the command `wrap`
    if given, which ends by exec'ing its arguments), with output in DIRECTORY/NAME.out and .err.
    Leaving the `with` block kills whatever is still running."""

    def __init__(self, trainrun, directory, env=None):
        self.trainrun, self.directory, self.env = trainrun, directory, env or {}
        self.started = []

    def __call__(self, name, args, env=None, netns=None, cwd=None, wrap=()):
        prefix = ([ip_binary(), "netns", "exec", netns] if netns else []) + list(wrap)
        agent = Agent(self.directory, name, [self.trainrun, *args], {**self.env, **(env or {})},
                      prefix, cwd)
        self.started.append(agent)
        return agent

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for agent in self.started:
            agent.kill()
