"""The built-in rendezvous' own cases: static ranks, the hosting agent, its endpoint, run ids and
tokens in the handshake. The scenarios every backend shares are in test_rendezvous.py."""
import os
import signal
import socket
import sys
import threading
import time

import pytest

from backends import Builtin, check_job, sigterm_one_of_two
from conftest import alive, dynamic, read_envs, read_pids, torch2_stub, wait_for, wait_for_pids
from ports import free_port, held_port
from torch_store import TorchStore


def test_static_backend_with_node_ranks(agents, worker, tmp_path):
    port = free_port()
    out = tmp_path / "env"
    out.mkdir()
    common = ["--nnodes=2", "--nproc-per-node=2", "--master-addr=127.0.0.1", f"--master-port={port}"]
    b = agents("b", common + ["--node-rank=1", worker, "env", str(out / "e")])
    a = agents("a", common + ["--node-rank=0", worker, "env", str(out / "e")])
    assert a.wait() == 0, a.err
    assert b.wait() == 0, b.err
    envs = read_envs(out)
    check_job(envs, 4, 2)
    assert {e["GROUP_RANK"] for r, e in envs.items() if r < 2} == {"0"}
    assert {e["MASTER_PORT"] for e in envs.values()} == {str(port)}


def test_cxx_all_reduce_across_agents(agents):
    demo = os.environ.get("ALLREDUCE_DEMO_BIN")
    if not demo:
        pytest.skip("allreduce_demo not built (LibTorch missing)")
    port = free_port()
    a = agents("a", dynamic(port, 2, 2) + [demo])
    b = agents("b", dynamic(port, 2, 1) + [demo])
    assert a.wait(120) == 0, a.err
    assert b.wait(120) == 0, b.err
    lines = sorted((a.out + b.out).splitlines())
    assert lines == [f"rank {r}/3: all_reduce sum=6 (expected 6) ok" for r in range(3)]


def test_endpoint_not_up_yet_is_retried(agents, worker, tmp_path):
    port = free_port()
    out = tmp_path / "env"
    out.mkdir()
    a = agents("a", dynamic(port, 2, 1, "--rdzv-conf=is_host=0") + [worker, "env", str(out / "e")])
    time.sleep(1.5)
    assert a.proc.poll() is None
    b = agents("b", dynamic(port, 2, 1, "--rdzv-conf=is_host=1") + [worker, "env", str(out / "e")])
    assert a.wait() == 0, a.err
    assert b.wait() == 0, b.err
    assert "retry" in a.err.lower() or "not reachable" in a.err.lower()
    check_job(read_envs(out), 2, 2)


def test_the_node_that_completes_the_round_does_not_say_it_waits(agents, worker):
    # The joiner is told how the round stood as it joined ("2 of 2 joined, N s of 600 s", the
    # round's wait): nothing a node whose join completed a fixed-size round waits for.
    port = free_port()
    a = agents("a", dynamic(port, 2, 1) + [worker, "exit", "0"])
    assert wait_for(lambda: "waiting for nodes: 1 of 2 joined" in a.err, 30), a.err
    b = agents("b", dynamic(port, 2, 1) + [worker, "exit", "0"])
    assert a.wait() == 0, a.err
    assert b.wait() == 0, b.err
    assert "waiting for nodes" not in b.err, b.err


def test_agent_of_another_job_is_refused(agents):
    port = free_port()
    a = agents("a", dynamic(port, 2, 1, "--rdzv-conf=is_host=1", run_id="jobA") + ["/bin/true"])
    time.sleep(0.5)
    b = agents("b", dynamic(port, 2, 1, run_id="jobB") + ["/bin/true"])
    assert b.wait(30) == 1, b.err
    reason = 'run id "jobB" does not match this rendezvous\'s run id'
    # The hint is the launcher's, on the node that has the option to change.
    assert (f"trainrun: the rendezvous at 127.0.0.1:{port} refused this node: {reason}; check "
            "--rdzv-id") in b.err.splitlines(), b.err
    # The host names the refused node and goes on waiting for its own job's nodes.
    assert wait_for(lambda: any(line.startswith("trainrun: rendezvous server: rejected 127.0.0.1:")
                                and line.endswith(f": {reason}") for line in a.err.splitlines()),
                    30), a.err


def test_wrong_token_is_refused(agents, tmp_path):
    port = free_port()
    a = agents("a", dynamic(port, 2, 1, "--rdzv-conf=is_host=1") + ["/bin/true"],
               env={"TRAINRUN_RDZV_TOKEN": "right"})
    time.sleep(0.5)
    b = agents("b", dynamic(port, 2, 1) + ["/bin/true"], env={"TRAINRUN_RDZV_TOKEN": "wrong"})
    assert b.wait(30) != 0
    reason = "the server's token proof does not match: the nodes hold different tokens"
    assert f"trainrun: this node refused the rendezvous at 127.0.0.1:{port}: {reason}" in \
        b.err.splitlines(), b.err
    # The host says it too, with the same reason, naming the refused node's address (its
    # "hosting ... token required" line is no answer).
    assert wait_for(lambda: any(line.startswith("trainrun: rendezvous server: rejected 127.0.0.1:")
                                and line.endswith(f": the client refused this rendezvous: {reason}")
                                for line in a.err.splitlines()), 30), a.err


def _run_agents_while(blocker, agents, port, conf, names=("a",)):
    """Starts one agent per name on `port` with `conf`, runs /bin/true, waits for them all, then
    closes `blocker` (what stands at the port); returns the agents, their exit codes, and the
    seconds from their start to the last one's end."""
    try:
        t0 = time.monotonic()
        procs = [agents(n, dynamic(port, 2, 1, conf) + ["/bin/true"]) for n in names]
        codes = [p.wait(120) for p in procs]
        return procs, codes, time.monotonic() - t0
    finally:
        blocker.close()


def test_port_held_by_a_process_that_does_not_listen_is_named_early(agents):
    # A socket bound to the port that never listens: no agent can host or connect.
    holder = held_port()
    port = holder.getsockname()[1]
    procs, codes, took = _run_agents_while(holder, agents, port, "--rdzv-conf=join_timeout=300",
                                           names=("a", "b"))
    expected = (f"trainrun: rendezvous endpoint 127.0.0.1:{port}: the port is in use by another "
                "process that is not a trainrun rendezvous host (bind: Address already in use; "
                "connect: Connection refused); free it or choose another --rdzv-endpoint port")
    for p, code in zip(procs, codes):
        assert code == 1, p.err
        lines = p.err.splitlines()
        assert expected in lines, p.err
        assert sum("not a trainrun rendezvous host" in line for line in lines) == 1, p.err
    # A few seconds' grace for a hosting agent that is starting, not the 300 s join timeout.
    assert took < 60, took


class _StrangeListener:
    """A listener on a free port that answers every connection with `answer` (b"": says
    nothing) and keeps it open."""

    def __init__(self, answer):
        self.sock = held_port()
        self.port = self.sock.getsockname()[1]
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.answer = answer
        self.conns = []
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while self.running:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.conns.append(conn)
            conn.sendall(self.answer)

    def close(self):
        self.running = False
        self.thread.join()
        for c in self.conns:
            c.close()
        self.sock.close()


def _named_once(agent, port):
    """The one line naming what listens at `port` on 127.0.0.1; what it says it sent follows."""
    prefix = (f"trainrun: rendezvous endpoint 127.0.0.1:{port} answers, but not as a trainrun "
              "rendezvous host: ")
    lines = [line for line in agent.err.splitlines() if "not as a trainrun rendezvous host" in line]
    assert len(lines) == 1, agent.err
    assert lines[0].startswith(prefix), agent.err
    assert lines[0].endswith("; check --rdzv-endpoint, or free the port"), agent.err
    assert "not reachable yet" not in agent.err, agent.err
    return lines[0][len(prefix):-len("; check --rdzv-endpoint, or free the port")]


@pytest.mark.parametrize("answer,shown", [
    (b"SSH-2.0-OpenSSH_9.2p1\r\n", 'it sent "SSH-2.0-OpenSSH_9.2p1\\x0d\\x0a"'),
    (b"\x00\x00\x00\x0bhello there", 'it sent "\\x00\\x00\\x00\\x0bhello there" (not a trainrun '
                                     'message: '),
    (bytes(range(0x80, 0x80 + 64)), 'it sent "' + "".join(f"\\x{b:02x}" for b in
                                                           range(0x80, 0x80 + 48)) + '"...')])
def test_listener_that_is_not_a_trainrun_agent_is_named_at_once(agents, answer, shown):
    listener = _StrangeListener(answer)
    port = listener.port
    (a,), (code,), took = _run_agents_while(listener, agents, port, "--rdzv-conf=join_timeout=300")
    assert code == 1, a.err
    assert _named_once(a, port).startswith(shown), a.err
    assert took < 60, took


class _HttpServer:
    """Python's own HTTP server on a free port of 127.0.0.1, in a thread: it reads a request line
    up to its newline, which the rendezvous' hello never sends."""

    def __init__(self):
        import http.server
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                      http.server.BaseHTTPRequestHandler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("kind", ["http", "silent"])
def test_listener_that_says_nothing_to_the_hello_is_named_after_one_handshake_timeout(agents,
                                                                                     kind):
    # Before, both were retried until the join timeout ("no answer to the handshake within 10 s,
    # retrying"). A trainrun host answers a hello at once or closes; this listener holds the
    # connection. Told that the agent has stopped sending, the HTTP server answers with its
    # error page (an HTTP/0.9 answer to a request line of one word: no status line).
    listener = _HttpServer() if kind == "http" else _StrangeListener(b"")
    port = listener.port
    (a,), (code,), took = _run_agents_while(listener, agents, port, "--rdzv-conf=join_timeout=300")
    assert code == 1, a.err
    what = _named_once(a, port)
    if kind == "http":
        assert what.startswith('it sent "<!DOCTYPE HTML>\\x0a<html'), a.err
    else:
        assert what == "it accepted the connection and sent nothing within 10 s", a.err
    # One handshake timeout (10 s) and a second's grace, not the 300 s join timeout.
    assert took < 60, took


def test_torch_1_tcpstore_at_the_endpoint_is_named_at_once(agents):
    # torchrun's c10d rendezvous and every job's MASTER_PORT are TCPStores. Torch 1.x's resets
    # each connection at the hello, as a flooded trainrun host may: before, it was retried until
    # the join timeout as "not reachable yet". Asked a store's question, it answers as a store.
    store = TorchStore(os.environ.get("PYTHON_EXEC", sys.executable))
    (a,), (code,), took = _run_agents_while(store, agents, store.port,
                                            "--rdzv-conf=join_timeout=300")
    assert code == 1, a.err
    assert _named_once(a, store.port) == ("it is a torch 1.x c10d TCPStore (it answered a store's "
                                          "key count)"), a.err
    assert took < 60, took


def test_remote_endpoint_is_retried_until_the_join_timeout_naming_every_failure(agents):
    # is_host=0: the agent does not own the endpoint, as on another machine than its host, so a
    # refusal may be a host that has not started yet. The port first refuses (bound, not
    # listening), then accepts and closes each connection after its hello: both failures are
    # named when the agent gives up, not only the last.
    holder = held_port()
    port = holder.getsockname()[1]
    closed = []

    def close_each():
        holder.settimeout(0.1)
        while not closed:
            try:
                conn, _ = holder.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(4096)  # its hello: closing unread would reset, not close
                except OSError:
                    pass

    closer = threading.Thread(target=close_each, daemon=True)
    try:
        t0 = time.monotonic()
        a = agents("a", dynamic(port, 2, 1, "--rdzv-conf=is_host=0,join_timeout=6") +
                   ["/bin/true"])
        assert wait_for(lambda: "Connection refused), retrying" in a.err, 30), a.err
        holder.listen(8)
        closer.start()
        code = a.wait(120)
        took = time.monotonic() - t0
    finally:
        closed.append(True)
        if closer.is_alive():
            closer.join()
        holder.close()
    assert code == 1, a.err
    assert took >= 5.5, took
    line = next((x for x in a.err.splitlines()
                 if f"rendezvous endpoint 127.0.0.1:{port}: no handshake completed in 6 s (" in x),
                None)
    assert line, a.err
    assert "attempts failed: Connection refused x" in line, line
    assert "connection closed by peer during the handshake x" in line, line
    assert line.endswith("is a trainrun agent of this job hosting it, and is --rdzv-endpoint "
                         "right?"), line


@pytest.mark.parametrize("job", ["program", "torch2-python"])
def test_both_nodes_of_a_finished_job_exit_together(agents, tmp_path, job):
    # The host leaves once the last connection has closed (protocol.md, "Ended"): after a
    # successful job neither node waits out a linger for a peer that has already gone, nor, for
    # Python workers of torch 2.x, the workers' c10d store it serves (its listener kept the
    # agent's last run of its event loop busy for 5 s).
    port = free_port()
    ended = {}
    entry, env = ["--no-python", "/bin/true"], None
    if job == "torch2-python":
        # The agent asks the workers' interpreter for torch's version; a stub says 2.x, so node
        # rank 0's agent serves the store (the worker itself imports nothing).
        stub = torch2_stub(tmp_path)
        script = tmp_path / "ok.py"
        script.write_text("import os\nassert os.environ['TORCHELASTIC_USE_AGENT_STORE'] == 'True'\n")
        entry = [str(script)]
        env = {"PYTHONPATH": stub, "PYTHON_EXEC": "/usr/bin/python3"}
    procs = [agents(name, dynamic(port, 2, 1) + entry, env=env) for name in ("a", "b")]

    def watch(p):
        p.proc.wait(60)
        ended[p.name] = time.monotonic()

    watchers = [threading.Thread(target=watch, args=(p,)) for p in procs]
    for t in watchers:
        t.start()
    for t in watchers:
        t.join(90)
    for p in procs:
        assert p.proc.returncode == 0, p.err
    assert sum("hosting the rendezvous" in p.err for p in procs) == 1
    # Bounded, not timed: the close linger (5 s) is what a node that waits for nothing misses.
    apart = abs(ended["a"] - ended["b"])
    assert apart < 2, f"the nodes exited {apart:.2f} s apart:\n{procs[0].err}\n{procs[1].err}"


def test_stopped_agent_does_not_hold_up_the_hosts_exit(agents, worker, tmp_path):
    port = free_port()
    pids = tmp_path / "pids"
    conf = "--rdzv-conf=heartbeat_timeout=2,keep_alive_interval=0.5"
    args = [worker, "pidfile", str(pids), "sleep", "60"]
    host = agents("host", dynamic(port, 2, 1, conf + ",is_host=1") + args)
    other = agents("other", dynamic(port, 2, 1, conf + ",is_host=0") + args)
    wait_for_pids(pids, 2, timeout=30)
    os.kill(other.proc.pid, signal.SIGSTOP)
    try:
        assert wait_for(lambda: "lost:" in host.err, 30), host.err
        declared = time.monotonic()
        code = host.wait(30)
        reacted = time.monotonic() - declared
        still_stopped = other.proc.poll() is None
    finally:
        os.kill(other.proc.pid, signal.SIGCONT)
    assert code == 1, host.err
    assert still_stopped
    # The host used to wait its whole 5 s close linger for the stopped peer to acknowledge.
    assert reacted < 3, f"host exited {reacted:.1f} s after declaring the node lost:\n{host.err}"
    # Resumed, the stopped agent learns that the job is over and stops its worker.
    assert other.wait(30) != 0, other.err


def test_host_stopped_by_a_signal_is_named_on_the_others(agents, worker, tmp_path):
    # A non-hosting node stopped so is a shared scenario (test_rendezvous.py).
    rdzv = Builtin()
    host, other = sigterm_one_of_two(rdzv, agents, worker, tmp_path, "host")
    name = socket.gethostname()
    expected = (f"trainrun: node {name} (127.0.0.1, pid {host.proc.pid}) lost (left: {name} "
                f"stopped by SIGTERM); it hosted the rendezvous at {rdzv.endpoint}, so the job "
                "cannot continue")
    # The host used to leave only "lost the rendezvous server at ...: connection closed by peer".
    assert expected in other.err.splitlines(), other.err
    assert "lost the rendezvous server" not in other.err, other.err


def test_failure_on_the_host_stops_every_node_with_its_code(agents, tmp_path):
    port = free_port()
    pids = tmp_path / "pids"
    script = tmp_path / "w.sh"
    script.write_text(f"#!/bin/sh\necho $$ >> {pids}\n"
                      f"[ \"$FAIL\" = 1 ] && while [ $(wc -l < {pids}) -lt 2 ]; do sleep 0.05; done"
                      " && exit 7\nexec sleep 60\n")
    script.chmod(0o755)
    host = agents("host", dynamic(port, 2, 1, "--rdzv-conf=is_host=1") + [str(script)],
                  env={"FAIL": "1"})
    other = agents("other", dynamic(port, 2, 1, "--rdzv-conf=is_host=0") + [str(script)],
                   env={"FAIL": "0"})
    assert host.wait(60) == 7, host.err
    assert other.wait(60) == 7, other.err
    for agent in (host, other):
        assert "FAILED" in agent.err, agent.err
        assert "exitcode  : 7" in agent.err, agent.err
    assert "lost the rendezvous server" not in other.err, other.err
    assert wait_for(lambda: not any(alive(p) for p in read_pids(pids)), 10)
