"""bench/bench_doc.py --check (the ctest docs_bench_figures) fails when a figure of the docs is not what its record renders: a
number in a table, a figure quoted in the prose, a plot, or a section whose record is gone. Each
test changes one thing in a copy of the source tree's docs and records."""
import os
import re
import shutil
import subprocess

import pytest

# Debian's Python, with python3-matplotlib (scripts/setup.sh), whichever Python runs pytest.
PYTHON = "/usr/bin/python3"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def check(root):
    return subprocess.run([PYTHON, os.path.join(ROOT, "bench", "bench_doc.py"), "--check",
                           "--root", str(root)], capture_output=True, text=True, timeout=600)


@pytest.fixture
def tree(tmp_path):
    """A copy of what --check reads: README.md, docs/ and bench/results/."""
    shutil.copy(os.path.join(ROOT, "README.md"), tmp_path / "README.md")
    shutil.copytree(os.path.join(ROOT, "docs"), tmp_path / "docs")
    shutil.copytree(os.path.join(ROOT, "bench", "results"), tmp_path / "bench" / "results")
    return tmp_path


def edit(path, pattern, replace):
    text = path.read_text()
    changed, n = re.subn(pattern, replace, text, count=1, flags=re.M)
    assert n == 1, f"{pattern!r} not in {path}"
    path.write_text(changed)


def test_a_changed_table_number_fails(tree):
    doc = tree / "docs" / "benchmarks.md"
    # The first data row of the launch overhead table: N = 1, its trainrun wall time.
    edit(doc, r"^(\| 1 \| )(\d+\.\d)", lambda m: m.group(1) + str(float(m.group(2)) + 1.0))
    r = check(tree)
    assert r.returncode == 1
    assert "section launch_overhead" in r.stdout, r.stdout


def test_a_changed_prose_figure_fails(tree):
    edit(tree / "docs" / "cli.md", r"\(about (\S+) s each for 16 Python workers",
         "(about 9.9 s each for 16 Python workers")
    r = check(tree)
    assert r.returncode == 1
    assert "docs/cli.md: quotes '9.9 s'" in r.stdout, r.stdout


def test_a_figure_outside_a_rendered_section_fails(tree):
    doc = tree / "docs" / "benchmarks.md"
    edit(doc, r"^## Plots$", "## Plots\n\nA launch takes 3.8 ms here.")
    r = check(tree)
    assert r.returncode == 1
    assert "'3.8 ms' outside a rendered section" in r.stdout, r.stdout


def test_a_missing_record_fails(tree):
    os.remove(tree / "bench" / "results" / "supervision.json")
    r = check(tree)
    assert r.returncode == 1
    assert "section supervision has no record bench/results/supervision.json" in r.stdout, r.stdout


def test_a_record_without_its_machine_fails(tree):
    path = tree / "bench" / "results" / "launch_overhead.json"
    edit(path, r'"machine": \{[^}]*\}', '"machine": "x86_64"')
    r = check(tree)
    assert r.returncode == 1
    assert "launch_overhead.json: lacks machine" in r.stdout, r.stdout


def test_a_changed_plot_fails(tree):
    with open(tree / "docs" / "img" / "launch_time.png", "ab") as f:
        f.write(b"\0")
    r = check(tree)
    assert r.returncode == 1
    assert "docs/img/launch_time.png: not what bench/plot.py draws" in r.stdout, r.stdout


def test_write_renders_what_check_wants(tree):
    before = check(tree).stdout
    doc = tree / "docs" / "benchmarks.md"
    edit(doc, r"^(\| 1 \| )(\d+\.\d)", lambda m: m.group(1) + "0.0")
    edit(tree / "docs" / "multinode.md", r"check of rank 0 took (\S+) s in all",
         "check of rank 0 took 0.1–0.2 s in all")
    r = subprocess.run([PYTHON, os.path.join(ROOT, "bench", "bench_doc.py"), "--write", "--root",
                        str(tree)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    # What --check found in the committed tree, if anything, and nothing more.
    assert check(tree).stdout == before
