"""The .deb that cpack builds, unpacked into a scratch root (dpkg-deb -x, nothing installed on the
machine) and used from there: --version, the man page, the bash completion, a two-worker job."""
import glob
import os
import re
import subprocess
import sys

import pytest

from installed import complete, render_man

BUILD = os.environ["TRAINRUN_BUILD_DIR"]
CPACK = os.environ.get("CPACK_COMMAND", "cpack")
WITH_RUNTIME = os.environ.get("TRAINRUN_WITH_RUNTIME") == "1"

JOB = """import os, sys
with open(os.path.join(sys.argv[1], "rank" + os.environ["RANK"]), "w") as f:
    f.write(os.environ["WORLD_SIZE"] + " " + os.environ["LOCAL_RANK"])
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The package's root after dpkg-deb -x, and the .deb."""
    work = tmp_path_factory.mktemp("deb")
    r = subprocess.run([CPACK, "-G", "DEB", "-B", str(work / "out"),
                        "--config", os.path.join(BUILD, "CPackConfig.cmake")],
                       cwd=BUILD, capture_output=True, text=True, timeout=550)
    assert r.returncode == 0, r.stdout + r.stderr
    debs = glob.glob(str(work / "out" / "*.deb"))
    assert len(debs) == 1, debs
    root = work / "root"
    subprocess.run(["dpkg-deb", "-x", debs[0], str(root)], check=True, timeout=120)
    return root, debs[0]


def test_package_fields(installed):
    _, deb = installed
    info = subprocess.run(["dpkg-deb", "-f", deb], capture_output=True, text=True,
                          check=True).stdout
    fields = dict(line.split(": ", 1) for line in info.splitlines() if ": " in line)
    assert fields["Package"] == "trainrun"
    assert fields["Maintainer"]
    assert "torchrun" in fields["Description"]
    assert "libc6" in fields["Depends"]  # computed from the binaries
    # What loads the installed bash completion.
    assert "bash-completion" in fields["Recommends"]


def test_installed_files(installed):
    root, _ = installed
    for path in ("usr/bin/trainrun", "usr/share/man/man1/trainrun.1",
                 "usr/share/bash-completion/completions/trainrun"):
        assert (root / path).is_file(), path
    if WITH_RUNTIME:
        assert glob.glob(str(root / "usr/lib*/**/libtrainrun_runtime.so*"), recursive=True)
        assert glob.glob(str(root / "usr/lib*/**/cmake/trainrun/trainrun-config.cmake"),
                         recursive=True)
        assert (root / "usr/include/trainrun/runtime/runtime.hpp").is_file()


def test_version(installed):
    root, _ = installed
    r = subprocess.run([str(root / "usr/bin/trainrun"), "--version"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("trainrun ")


def test_man_page(installed):
    root, _ = installed
    text = render_man(str(root / "usr/share/man/man1/trainrun.1"))
    assert "trainrun - launch and supervise" in text
    assert "--nproc-per-node" in text and "ERROR FILES" in text
    # SEE ALSO names only what the package installs.
    see_also = text.split("SEE ALSO", 1)[1]
    guides = re.findall(r"\b([a-z]+\.md)\b", see_also)
    assert guides and "torchrun(1)" not in see_also, see_also
    for guide in guides:
        assert (root / "usr/share/doc/trainrun" / guide).is_file(), guide


def test_every_link_of_an_installed_guide_resolves_among_them(installed):
    # A guide's relative links (other.md, other.md#section, img/x.png) name installed files.
    root, _ = installed
    docs = root / "usr/share/doc/trainrun"
    guides = sorted(docs.glob("*.md"))
    assert {g.name for g in guides} >= {"install.md", "cli.md", "multinode.md", "hangs.md"}
    broken = []
    for guide in guides:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", guide.read_text()):
            if "://" not in target and not (docs / target).is_file():
                broken.append(f"{guide.name} -> {target}")
    assert not broken, broken


def test_bash_completion(installed):
    root, _ = installed
    completion = str(root / "usr/share/bash-completion/completions/trainrun")
    assert complete(completion, "--nproc-per") == ["--nproc-per-node"]
    r = subprocess.run(["bash", "-c", 'source "$1"; complete -p trainrun', "x", completion],
                       capture_output=True, text=True, timeout=60)
    assert "-F _trainrun" in r.stdout, r.stderr


def test_two_worker_job(installed, tmp_path):
    root, _ = installed
    script = tmp_path / "job.py"
    script.write_text(JOB)
    out = tmp_path / "out"
    out.mkdir()
    r = subprocess.run([str(root / "usr/bin/trainrun"), "--standalone", "--nproc-per-node=2",
                        str(script), str(out)], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHON_EXEC=sys.executable))
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(out)) == ["rank0", "rank1"]
    assert (out / "rank0").read_text() == "2 0"
    assert (out / "rank1").read_text() == "2 1"
