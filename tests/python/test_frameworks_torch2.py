"""PyTorch Lightning's and Hugging Face's Trainers (PyPI, CPU, Gloo) under trainrun, with and
without --preload=torch, and under torchrun of the same torch 2.x: the same results to the printed
digits. Run with TRAINRUN_PYTHON, an interpreter with torch 2.x, lightning and transformers
(scripts/setup-pypi.sh installs them)."""
import os
import re
import subprocess

import pytest
from preload_jobs import PY, trainrun

HERE = os.path.dirname(os.path.abspath(__file__))
JOBS = {"lightning": ["lightning_train.py"], "transformers": ["hf_train.py", "out"]}


def results(stdout):
    """Each rank's closing line, and the losses the Trainer logs (Hugging Face's, on rank 0).
    Found anywhere in the output: the Trainer prints a log under -u as its text and then its
    newline, and another rank's line may come between the two."""
    return sorted(re.findall(r"\{'loss'[^}]*\}|rank \d+ of \d+: [^\n]*", stdout))


@pytest.mark.parametrize("framework", sorted(JOBS))
def test_a_trainer_gives_the_same_results_with_and_without_preload_and_under_torchrun(
        tmp_path, framework):
    script, *args = JOBS[framework]
    command = ["--nproc-per-node=2", os.path.join(HERE, script), *args]
    runs = []
    for preload in (False, True):
        r = trainrun(tmp_path, preload, command, 2)
        assert r.returncode == 0, r.stderr[-4000:]
        runs.append(results(r.stdout))
    p = subprocess.Popen([PY, "-m", "torch.distributed.run", *command], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                         env=os.environ)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-4000:]
    plain, warm = runs
    assert plain == warm == results(out), (plain, warm, out)
    ranks = [line for line in warm if line.startswith("rank ")]
    assert [line.split(":")[0] for line in ranks] == ["rank 0 of 2", "rank 1 of 2"], warm
    assert all(" steps=4 " in line for line in ranks), warm
