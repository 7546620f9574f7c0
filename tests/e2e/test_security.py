"""The rendezvous secret: where the token may come from, that it stays with the launcher, and that
a host between two agents can neither alter nor replay a frame of a running rendezvous."""
import os
import socket
import struct
import threading

import pytest

from conftest import dynamic, read_envs, recv_exactly, run, wait_for
from ports import free_port, held_port

TOKEN = "correct-horse-battery-staple-7f3a"


def token_file(tmp_path, mode=0o600, text=TOKEN + "\n"):
    path = tmp_path / "token"
    path.write_text(text)
    os.chmod(path, mode)
    return path


def launcher_lines(err):
    return [line for line in err.splitlines() if line.startswith("trainrun:")]


# --- the token stays with the launcher ---------------------------------------------------------

@pytest.mark.parametrize("source", ["env", "file"])
def test_token_never_reaches_a_worker(worker, tmp_path, source):
    out = tmp_path / "env"
    out.mkdir()
    env, conf = {}, []
    if source == "env":
        env["TRAINRUN_RDZV_TOKEN"] = TOKEN
    else:
        conf = [f"--rdzv-conf=token_file={token_file(tmp_path)}"]
    r = run(dynamic(free_port(), 1, 1, *conf, run_id="sec") + [worker, "env", str(out / "e")],
            env=env)
    assert r.returncode == 0, r.stderr
    (worker_env,) = read_envs(out).values()
    assert worker_env["RANK"] == "0"
    holding = [name for name, value in worker_env.items() if TOKEN in value]
    assert holding == [], f"the token reached the worker in {holding}"


# --- which token files are accepted ------------------------------------------------------------

@pytest.mark.parametrize("mode,who", [(0o640, "its group"), (0o644, "others")])
def test_token_file_others_can_read_is_refused(tmp_path, mode, who):
    path = token_file(tmp_path, mode)
    r = run(dynamic(free_port(), 1, 1, f"--rdzv-conf=token_file={path}", run_id="sec")
            + ["/bin/true"], timeout=30)
    assert r.returncode == 2, r.stderr
    assert launcher_lines(r.stderr) == [
        f"trainrun: --rdzv-conf token_file={path}: readable by {who} (mode {mode:04o}); make it "
        f"private with `chmod 600 {path}`, or accept it with --rdzv-conf token_file_mode=any"]


def test_token_file_mode_any_accepts_a_shared_file(tmp_path):
    path = token_file(tmp_path, 0o644)
    r = run(dynamic(free_port(), 1, 1, f"--rdzv-conf=token_file={path},token_file_mode=any",
                    run_id="sec")
            + ["/bin/true"], timeout=60)
    assert r.returncode == 0, r.stderr


# --- a token is never dropped without a word ---------------------------------------------------

@pytest.mark.parametrize("source", ["env", "file"])
def test_a_token_with_the_etcd_backend_is_refused_not_ignored(tmp_path, source):
    env, conf = {}, []
    if source == "env":
        env["TRAINRUN_RDZV_TOKEN"] = TOKEN
    else:
        conf = [f"--rdzv-conf=token_file={token_file(tmp_path)}"]
    # Nothing listens on the endpoint: the refusal comes before any connection.
    r = run(["--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=etcd",
             f"--rdzv-endpoint=127.0.0.1:{free_port()}", "--rdzv-id=sec", *conf, "/bin/true"],
            env=env, timeout=30)
    assert r.returncode == 2, r.stderr
    (line,) = launcher_lines(r.stderr)
    assert "etcd backend does not use a rendezvous token" in line, r.stderr


def test_an_empty_token_variable_is_refused_as_a_blank_one_is(tmp_path):
    r = run(dynamic(free_port(), 1, 1, run_id="sec") + ["/bin/true"],
            env={"TRAINRUN_RDZV_TOKEN": ""}, timeout=30)
    assert r.returncode == 2, r.stderr
    assert launcher_lines(r.stderr) == [
        "trainrun: TRAINRUN_RDZV_TOKEN is empty; set the shared token or unset it"]


def test_refusals_held_back_by_the_rate_limit_are_counted_by_kind(agents, tmp_path):
    port = free_port()
    host = agents("host", dynamic(port, 2, 1, "--rdzv-conf=is_host=1,join_timeout=60",
                                  run_id="sec") + ["/bin/true"], env={"TRAINRUN_RDZV_TOKEN": TOKEN})
    assert wait_for(lambda: "waiting for nodes" in host.err, 30), host.err
    # Within one refusal-log interval (10 s): the first refusal of each kind is logged with its
    # reason, the rest held back and counted.
    strangers = [agents(f"wrong{i}", dynamic(port, 2, 1, run_id="sec") + ["/bin/true"],
                        env={"TRAINRUN_RDZV_TOKEN": "wrong"}) for i in range(3)]
    strangers.append(agents("other", dynamic(port, 2, 1, run_id="other") + ["/bin/true"],
                            env={"TRAINRUN_RDZV_TOKEN": TOKEN}))
    for s in strangers:
        assert s.wait(30) != 0, s.err
    assert wait_for(lambda: "more refusals" in host.err, 30), host.err
    (line,) = [l for l in host.err.splitlines() if "more refusals" in l]
    assert line.endswith("... and 2 more refusals: 2 wrong token"), line
    refused = [l for l in host.err.splitlines() if "rejected 127.0.0.1:" in l]
    assert len(refused) == 2, host.err
    # The wrong token's reason is shown once, whichever kind came first (it used to be only
    # counted when the wrong run id was refused first).
    (token_line,) = [l for l in refused if "the client refused this rendezvous" in l]
    assert token_line.endswith("the server's token proof does not match: the nodes hold "
                               "different tokens"), token_line
    assert sum('run id "other" does not match' in l for l in refused) == 1, host.err
    host.kill()


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_token_file_that_is_not_a_regular_file_is_refused_at_once(tmp_path, kind):
    path = tmp_path / kind
    if kind == "directory":
        path.mkdir(mode=0o700)
        what = "a directory"
    else:
        os.mkfifo(path, 0o600)  # nobody ever writes to it: reading it would block for good
        what = "a FIFO"
    r = run(dynamic(free_port(), 1, 1, f"--rdzv-conf=token_file={path}", run_id="sec")
            + ["/bin/true"], timeout=30)
    assert r.returncode == 2, r.stderr
    assert launcher_lines(r.stderr) == [
        f"trainrun: --rdzv-conf token_file={path}: it is {what}, not a regular file; put the "
        "token in a file"]


# --- a man in the middle -----------------------------------------------------------------------

class FrameProxy:
    """A TCP proxy on loopback between one agent and the rendezvous host that understands the
    framing (4-byte big-endian length, then the body). In direction `direction` ("to_host" or
    "to_agent") it alters one byte of frame number `index` (counted from 0 on the first
    connection), or sends that frame twice."""

    def __init__(self, target_port, direction, index, action):
        self.target_port, self.direction = target_port, direction
        self.index, self.action = index, action
        self.done = threading.Event()  # the frame was tampered with
        self.listener = held_port()
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.sockets = [self.listener]
        self.threads = []
        self.used = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                agent, _ = self.listener.accept()
            except OSError:
                return
            host = socket.create_connection(("127.0.0.1", self.target_port))
            self.sockets += [agent, host]
            tamper = not self.used  # only the first connection: the agent's one to the host
            self.used = True
            for src, dst, name in ((agent, host, "to_host"), (host, agent, "to_agent")):
                args = (src, dst, tamper and name == self.direction)
                t = threading.Thread(target=self._pump, args=args, daemon=True)
                t.start()
                self.threads.append(t)

    def _pump(self, src, dst, tamper):
        count = 0
        try:
            while True:
                header = recv_exactly(src, 4)
                if header is None:
                    break
                body = recv_exactly(src, struct.unpack(">I", header)[0])
                if body is None:
                    break
                frame = header + body
                if tamper and count == self.index:
                    if self.action == "alter":
                        # A byte of the JSON payload, not of the tag: "heartbeat" becomes
                        # "heartbeaT" and the like, a valid message had it not been sealed.
                        i = 4 + len(body) // 3
                        frame = frame[:i] + bytes([frame[i] ^ 0x20]) + frame[i + 1:]
                        dst.sendall(frame)
                    else:
                        dst.sendall(frame + frame)
                    self.done.set()
                else:
                    dst.sendall(frame)
                count += 1
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        for s in self.sockets:
            try:
                s.close()
            except OSError:
                pass


# Frames with a token: to the host hello (0), auth (1), then sealed: join (2), then heartbeats
# (every 0.3 s here) while the workers sleep; to the agent challenge (0), then sealed: welcome (1)
# and what follows (the round's assignment).
@pytest.mark.parametrize("direction,index", [("to_host", 3), ("to_agent", 2)])
@pytest.mark.parametrize("action", ["alter", "replay"])
def test_a_tampered_or_replayed_frame_ends_the_job_with_the_reason(agents, worker, tmp_path,
                                                                   direction, index, action):
    host_port = free_port()
    liveness = "keep_alive_interval=0.3,heartbeat_timeout=20,join_timeout=60"
    env = {"TRAINRUN_RDZV_TOKEN": TOKEN}
    work = [worker, "sleep", "60"]
    a = agents("a", dynamic(host_port, 2, 1, f"--rdzv-conf=is_host=1,{liveness}", run_id="sec")
               + work, env=env)
    # The host joins first, so that the round forms on the other agent's join.
    assert wait_for(lambda: "waiting for nodes" in a.err, 60), a.err
    proxy = FrameProxy(host_port, direction, index, action)
    try:
        b = agents("b", dynamic(proxy.port, 2, 1, f"--rdzv-conf=is_host=0,{liveness}",
                                run_id="sec") + work, env=env)
        code_b, code_a = b.wait(60), a.wait(60)
    finally:
        proxy.close()
    assert proxy.done.is_set(), "the proxy never saw the frame to tamper with"
    assert code_a != 0 and code_b != 0, (a.err, b.err)
    reason = "authentication failed on frame"
    if direction == "to_host":
        # The host refuses the frame, says why, and ends the job: the node is lost.
        assert any(reason in line and "lost" in line for line in launcher_lines(a.err)), a.err
        assert any(f"dropped this node: {reason}" in line for line in launcher_lines(b.err)), b.err
    else:
        # The agent refuses the frame and says why; the host sees it go.
        assert any(f"was tampered with: {reason}" in line for line in launcher_lines(b.err)), b.err
        assert any("lost" in line for line in launcher_lines(a.err)), a.err
    # Both stop their workers (SIGTERM) instead of waiting out the 60 s sleep.
    assert not any("still running" in line for line in launcher_lines(a.err + b.err))
