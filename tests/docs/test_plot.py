"""bench/plot.py draws every plot of docs/benchmarks.md from the committed benchmark results."""
import os
import subprocess

# Debian's Python, with python3-matplotlib (scripts/setup.sh), whichever Python runs pytest.
PLOT_PYTHON = "/usr/bin/python3"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLOTS = ["launch_time.png", "failure_to_exit.png", "tee_throughput.png", "rendezvous.png",
         "allreduce_bandwidth.png", "fashion_mnist.png", "at_scale.png"]


def test_plots_from_committed_results(tmp_path):
    r = subprocess.run([PLOT_PYTHON, os.path.join(ROOT, "bench", "plot.py"), "--out",
                        str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for name in PLOTS:
        with open(tmp_path / name, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", name
    doc = open(os.path.join(ROOT, "docs", "benchmarks.md")).read()
    for name in PLOTS:
        assert f"(img/{name})" in doc, f"docs/benchmarks.md does not show img/{name}"
        assert os.path.exists(os.path.join(ROOT, "docs", "img", name)), name


def test_missing_results_are_named(tmp_path):
    r = subprocess.run([PLOT_PYTHON, os.path.join(ROOT, "bench", "plot.py"), "--data",
                        str(tmp_path), "--out", str(tmp_path / "img")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode != 0
    assert "launch_overhead.json missing" in r.stderr
