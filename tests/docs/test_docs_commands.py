"""Runs every shell command shown in README.md and docs/*.md, so the documentation cannot rot.

What runs: fenced blocks whose language is `sh`, `bash` or `console` (indented inside a list item
too, read without that indent). An `sh`/`bash` block runs as one bash script
(`set -e -o pipefail`); in a `console` block the lines that start with `$ ` are the commands (a line ending in
`\\` continues on the next) and the other lines are their output, which is shown to the reader and
not compared (`expect` below checks what matters). The blocks of one document run in order, in one
fresh directory, with the build's `trainrun` first on `PATH` and these files in place of the
user's: `train.py` (a Python script), `mypkg/train.py` (a module) and `./train` (an executable),
each printing its rank and arguments.

Directives are HTML comments on the lines right before the opening fence, one per line:

  <!-- norun: REASON -->     the block is not run (installs packages, builds, runs the whole
                             suite, needs a second machine); the reason is required.
  <!-- file: NAME -->        the block is not run but written to NAME in the directory, before
                             any block of the document runs (a script the commands use).
  <!-- exit: N -->           the block must end with exit status N (default 0; without it any
                             failing command fails the block).
  <!-- expect: TEXT -->      TEXT must appear in the block's output (stdout and stderr); with
                             `together`, in the output of the group.
  <!-- together: NAME -->    the blocks of the document with this NAME run at the same time, one
                             bash each, started in order half a second apart: the nodes of one
                             multi-node job, here two agents on loopback.
  <!-- snippet: ... -->      (on a `cpp` block, one per document) compiled and run by
                             tests/docs/CMakeLists.txt.

Before a block runs, what names other machines becomes this one (whole words): the host names
`node0`, `node1` and the addresses `10.0.0.1`, `10.0.0.2` become `127.0.0.1`; the interfaces
`eth0`, `eth1` become `lo`; the ports 29400 and 29500 become free ports, new for each block or
group (so 29501, the static rendezvous port, follows 29500). Blocks in other languages (`python`,
`cpp`, `cmake`, none) are not run, but a block without a language whose lines start with
`trainrun --` or `$ ` fails the test: a command must be marked runnable or `norun`.

A block that runs `trainrun --hosts` reaches its hosts over real ssh: the document's blocks share
an sshd of the test's own (openssh-server) on a free port of 127.0.0.1 and 127.0.0.2, taking a key
the test makes and logging in as the user the test runs as; the block gets `TRAINRUN_SSH` naming
that port and key, and `PET_MASTER_PORT` the free port of 29500 (trainrun passes it to every
agent); `~/.trainrun_env` (the test's home) forwards `PYTHON_EXEC` where it is set, since a login's
Python is not the test's. Its host names become addresses of their own, each host a login of its
own: `node0` `127.0.0.1`, `node1` `127.0.0.2`, and `node9` `127.0.0.9`, where nothing listens (a
host that is down).
"""
import glob
import os
import re
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from ports import free_port  # noqa: E402

TRAINRUN = os.environ.get("TRAINRUN_BIN", "")
DOCS = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
RUN_LANGUAGES = {"sh", "bash", "console"}
DIRECTIVE = re.compile(r"^<!--\s*([a-z-]+):\s*(.*?)\s*-->$")
KNOWN = {"norun", "file", "exit", "expect", "together", "snippet"}
BLOCK_TIMEOUT = 600
HOSTS = {"node0": "127.0.0.1", "node1": "127.0.0.1", "10.0.0.1": "127.0.0.1",
         "10.0.0.2": "127.0.0.1", "eth0": "lo", "eth1": "lo"}
SSH_HOSTS = dict(HOSTS, node1="127.0.0.2", node9="127.0.0.9")
SSHD = "/usr/sbin/sshd"

WORKER_PY = """import os, sys
print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}: {sys.argv[0]} {sys.argv[1:]}")
"""
WORKER_SH = """#!/bin/sh
echo "rank $RANK of $WORLD_SIZE: $0 $*"
"""


class Block:
    def __init__(self, doc, line, language, text, directives):
        self.doc, self.line, self.language, self.text = doc, line, language, text
        self.directives = directives

    @property
    def where(self):
        return f"{self.doc}:{self.line}"

    def script(self):
        """The bash script this block runs."""
        if self.language != "console":
            return self.text
        commands, current = [], None
        for line in self.text.splitlines():
            if current is not None:
                current += "\n" + line
            elif line.startswith("$ "):
                current = line[2:]
            else:
                continue
            if not current.endswith("\\"):
                commands.append(current)
                current = None
        return "\n".join(commands) + "\n"


def parse(doc):
    """The fenced blocks of a Markdown file, with the directives right before each."""
    lines = open(os.path.join(ROOT, doc)).read().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        # A block may be indented, inside a list item: its lines lose that indent.
        fence = re.match(r"^( *)(```+)\s*([\w-]*)", lines[i])
        if not fence:
            i += 1
            continue
        indent, ticks, language = fence.groups()
        directives, j = {}, i - 1
        while j >= 0 and DIRECTIVE.match(lines[j].strip()):
            key, value = DIRECTIVE.match(lines[j].strip()).groups()
            assert key in KNOWN, f"{doc}:{j + 1}: unknown directive {key!r} (known: {sorted(KNOWN)})"
            directives[key] = value
            j -= 1
        end = i + 1
        while end < len(lines) and not lines[end].lstrip(" ").startswith(ticks):
            end += 1
        assert end < len(lines), f"{doc}:{i + 1}: the fence is never closed"
        text = [line[len(indent):] if line.startswith(indent) else line.lstrip(" ")
                for line in lines[i + 1:end]]
        blocks.append(Block(doc, i + 1, language, "\n".join(text) + "\n", directives))
        i = end + 1
    return blocks


def substitute(text, ports, hosts=HOSTS):
    for name, value in hosts.items():
        text = re.sub(r"(?<![\w.-])" + re.escape(name) + r"(?![\w-]|\.\d)", value, text)
    for default, port in ports.items():
        text = re.sub(rf"(?<!\d){default}(?!\d)", str(port), text)
    return text


def fresh_ports():
    return {29400: free_port(), 29500: free_port()}


def uses_hosts(block):
    return re.search(r"\btrainrun\b.*--hosts", block.script()) is not None


class Sshd:
    """sshd on a free port of 127.0.0.1 and 127.0.0.2 for the --hosts blocks of one document:
    it takes a key made here and logs in as the user the test runs as."""

    def __init__(self, directory):
        directory.mkdir()
        self.directory = directory
        self.key = directory / "key"
        for name in ("key", "hostkey"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                            str(directory / name)], check=True)
        (directory / "authorized_keys").write_text((directory / "key.pub").read_text())
        self.port = free_port()
        conf = directory / "sshd_config"
        conf.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", "ListenAddress 127.0.0.2",
            f"HostKey {directory / 'hostkey'}",
            f"AuthorizedKeysFile {directory / 'authorized_keys'}",
            f"PidFile {directory / 'sshd.pid'}", "UsePAM no", "PermitRootLogin prohibit-password",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "StrictModes no", ""]))
        if os.geteuid() == 0:
            # sshd refuses to start as root without its privilege separation directory.
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        self.log = directory / "sshd.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(conf)], stdout=log,
                                         stderr=log)
        deadline = time.monotonic() + 30
        while subprocess.run(self.words() + ["127.0.0.2", "true"], capture_output=True,
                             timeout=30).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"sshd did not start: {self.log.read_text()}")
            time.sleep(0.1)

    def words(self):
        return ["ssh", "-F", "/dev/null", "-p", str(self.port), "-i", str(self.key), "-o",
                "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no", "-o",
                "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


def environment(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(TRAINRUN, bin_dir / "trainrun")
    return dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", HOME=str(tmp_path))


def provide_files(work, blocks):
    (work / "train.py").write_text(WORKER_PY)
    (work / "mypkg").mkdir()
    (work / "mypkg" / "__init__.py").write_text("")
    (work / "mypkg" / "train.py").write_text(WORKER_PY)
    (work / "train").write_text(WORKER_SH)
    (work / "train").chmod(0o755)
    for b in blocks:
        if "file" in b.directives:
            (work / b.directives["file"]).write_text(b.text)


def run_group(group, work, env, sshd=None):
    """Runs the blocks of one group at once; returns [(block, exit status, output)]. `sshd`: the
    document's, for the blocks that use --hosts."""
    ports = fresh_ports()
    procs = []
    for k, block in enumerate(group):
        if k:
            time.sleep(0.5)  # the first block of a group is the node that hosts
        log = open(work / f".block{block.line}.out", "w+")
        block_env, hosts = env, HOSTS
        if uses_hosts(block):
            block_env = dict(env, TRAINRUN_SSH=" ".join(sshd.words()),
                             PET_MASTER_PORT=str(ports[29500]))
            hosts = SSH_HOSTS
        script = ("" if "exit" in block.directives else "set -e -o pipefail\n") + \
            substitute(block.script(), ports, hosts)
        procs.append((block, subprocess.Popen(["bash", "-c", script], cwd=work, env=block_env,
                                              stdout=log, stderr=subprocess.STDOUT,
                                              start_new_session=True), log))
    results = []
    for block, proc, log in procs:
        try:
            proc.wait(timeout=BLOCK_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        log.seek(0)
        results.append((block, proc.returncode, log.read()))
        log.close()
    return results


def check(results):
    """The failures of one group, as messages."""
    failures = []
    output = "".join(out for _, _, out in results)
    for block, code, out in results:
        want = int(block.directives.get("exit", "0"))
        if code != want:
            failures.append(f"{block.where}: exit status {code}, expected {want}; output:\n{out}")
    for block, _, _ in results:
        if "expect" in block.directives and block.directives["expect"] not in output:
            failures.append(f"{block.where}: {block.directives['expect']!r} not in the output:\n"
                            f"{output}")
    return failures


def runnable(block):
    return block.language in RUN_LANGUAGES and not {"norun", "file"} & set(block.directives)


def groups(blocks):
    """Runnable blocks in document order, those sharing a `together` name as one group."""
    seen, out = {}, []
    for b in filter(runnable, blocks):
        name = b.directives.get("together")
        if name is None:
            out.append([b])
        elif name in seen:
            seen[name].append(b)
        else:
            seen[name] = [b]
            out.append(seen[name])
    return out


def test_conventions_hold():
    """Every command block is runnable or says why not; directives are known and well formed."""
    problems = []
    for doc in DOCS:
        for b in parse(doc):
            if "norun" in b.directives and not b.directives["norun"]:
                problems.append(f"{b.where}: norun needs a reason")
            if b.language == "" and re.search(r"^(trainrun --|\$ )", b.text, re.M):
                problems.append(f"{b.where}: a command in a block without a language: mark it "
                                "sh/console (it then runs) or add <!-- norun: reason -->")
            if b.language == "console" and runnable(b) and not b.script().strip():
                problems.append(f"{b.where}: a console block without a `$ ` command")
    assert not problems, "\n".join(problems)


def test_substitution_names_this_machine():
    text = "--rdzv-endpoint=node0:29400 --master-addr=node1 --local-addr=10.0.0.2 eth0 node01 eth9"
    got = substitute(text, {29400: 12345, 29500: 23456})
    assert got == ("--rdzv-endpoint=127.0.0.1:12345 --master-addr=127.0.0.1 --local-addr=127.0.0.1 "
                   "lo node01 eth9")


@pytest.mark.parametrize("doc", DOCS)
def test_commands_in(doc, tmp_path):
    if not TRAINRUN or not os.access(TRAINRUN, os.X_OK):
        pytest.fail("set TRAINRUN_BIN to the built trainrun binary (ctest does)")
    blocks = parse(doc)
    work = tmp_path / "work"
    work.mkdir()
    provide_files(work, blocks)
    env = environment(tmp_path)
    sshd = None
    if any(uses_hosts(b) for b in filter(runnable, blocks)):
        if not os.access(SSHD, os.X_OK):
            pytest.fail(f"{doc} runs trainrun --hosts: install openssh-server (scripts/setup.sh)")
        sshd = Sshd(tmp_path / "sshd")
        if env.get("PYTHON_EXEC"):
            (tmp_path / ".trainrun_env").write_text(f"PYTHON_EXEC={env['PYTHON_EXEC']}\n")
    failures = []
    try:
        for group in groups(blocks):
            failures += check(run_group(group, work, env, sshd))
    finally:
        if sshd:
            sshd.stop()
    assert not failures, "\n\n".join(failures)
