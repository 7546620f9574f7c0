"""The FashionMNIST example end to end: the C++ program on the real Debian files in every mode,
its errors for bad data, resuming after a crash, and the Python drop-in under both launchers.

Groups (ctest runs each with -k): smoke, bad_data, modes, resume, python.
"""
import gzip
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ports import standalone_args  # noqa: E402

TRAINRUN = os.environ.get("TRAINRUN_BIN", "")
PROGRAM = os.environ.get("FASHION_MNIST_BIN", "")
REFERENCE = os.environ.get("REFERENCE_TORCHRUN", "")
PYTHON = os.environ.get("PYTHON_EXEC", "/usr/bin/python3")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY_EXAMPLE = os.path.join(ROOT, "apps", "examples", "fashion_mnist", "train_fashion_mnist.py")
DATA = "/usr/share/datasets/fashion-mnist"
FILES = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
         "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]

EPOCH_LINE = re.compile(r"epoch (\d+)/(\d+): loss ([0-9.]+), train accuracy ([0-9.]+)%, "
                        r"test accuracy ([0-9.]+)%, (\d+) images/s")
TEST_LINE = re.compile(r"^test accuracy: ([0-9.]+)%", re.M)
STEP_LINE = re.compile(r"epoch (\d+) step (\d+): loss ([0-9.]+)")


@pytest.fixture(autouse=True)
def binaries():
    for name, path in (("TRAINRUN_BIN", TRAINRUN), ("FASHION_MNIST_BIN", PROGRAM)):
        if not path or not os.access(path, os.X_OK):
            pytest.fail(f"set {name} to the built binary (ctest does)")
    if not all(os.path.exists(os.path.join(DATA, f)) for f in FILES):
        pytest.skip(f"FashionMNIST is not installed in {DATA} (Debian: dataset-fashion-mnist)")


def run(cmd, tmp_path, timeout, env=None):
    full = dict(os.environ)
    full["TRAINRUN_STORAGE_PATH"] = str(tmp_path / "results")
    full.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full)


def ok(result):
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


def epochs(output):
    """[(epoch, loss, test accuracy)] from the epoch lines rank 0 printed."""
    return [(int(m[1]), float(m[3]), float(m[5]) / 100) for m in EPOCH_LINE.finditer(output)]


def final_accuracy(output):
    found = TEST_LINE.findall(output)
    assert len(found) == 1, f"expected one final test accuracy line:\n{output}"
    return float(found[0]) / 100


def metrics_lines(tmp_path, name):
    with open(tmp_path / "results" / name / "metrics.jsonl") as f:
        return [json.loads(line) for line in f]


def checkpoints(tmp_path, name):
    run_dir = tmp_path / "results" / name
    return sorted(p for p in os.listdir(run_dir) if p.startswith("checkpoint_"))


SMALL = ["--subset", "256", "--test-subset", "200", "--epochs", "1", "--threads", "1"]


def test_smoke_one_worker_under_trainrun(tmp_path):
    out = ok(run([TRAINRUN, "--standalone", "--nproc-per-node=1", PROGRAM, *SMALL,
                  "--name", "smoke"], tmp_path, timeout=100))
    assert [e[0] for e in epochs(out)] == [1]
    loss = epochs(out)[0][1]
    assert 0 < loss < 5, out
    assert 0 <= final_accuracy(out) <= 1
    lines = metrics_lines(tmp_path, "smoke")
    assert [m["epoch"] for m in lines] == [1]
    assert lines[0]["loss"] == pytest.approx(loss, abs=1e-4)
    [ckpt] = checkpoints(tmp_path, "smoke")
    files = os.listdir(tmp_path / "results" / "smoke" / ckpt)
    assert {"model.pt", "optimizer.pt", "train_state.json"} <= set(files)


# --- bad data -------------------------------------------------------------------------------

def data_copy(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    for f in FILES:
        if f.startswith("t10k"):
            shutil.copy(os.path.join(DATA, f), d / f)
    return d


def small_idx_images(count, magic=0x803, rows=28):
    return struct.pack(">IIII", magic, count, rows, rows) + bytes(count * rows * rows)


def small_idx_labels(labels, magic=0x801):
    return struct.pack(">II", magic, len(labels)) + bytes(labels)


def write_gz(path, data):
    with gzip.open(path, "wb") as f:
        f.write(data)


def one_line_error(result, *fragments):
    assert result.returncode == 1, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fashion_mnist: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], result.stderr
    assert "terminate" not in result.stderr and "Abort" not in result.stderr


@pytest.mark.parametrize("case", ["missing_dir", "missing_file", "not_gzip", "truncated_gzip",
                                  "bad_magic", "truncated_idx", "count_mismatch", "bad_label",
                                  "empty_file"])
def test_bad_data_is_one_clear_error(tmp_path, case):
    d = data_copy(tmp_path)
    images, labels = d / "train-images-idx3-ubyte.gz", d / "train-labels-idx1-ubyte.gz"
    write_gz(images, small_idx_images(4))
    write_gz(labels, small_idx_labels([1, 2, 3, 4]))
    expect = {
        "missing_dir": (str(tmp_path / "nowhere"), "does not exist"),
        "missing_file": (str(labels), "no such file"),
        "not_gzip": (str(images), "not a gzip file"),
        "truncated_gzip": (str(images), "truncated gzip file"),
        "bad_magic": (str(images), "not an IDX image file"),
        "truncated_idx": (str(images), "(truncated)"),
        "count_mismatch": ("4 images, but", "has 3 labels"),
        "bad_label": (str(labels), "label 12 at index 2"),
        "empty_file": (str(images), "not a gzip file"),
    }[case]
    data_dir = d
    if case == "missing_dir":
        data_dir = tmp_path / "nowhere"
    elif case == "missing_file":
        labels.unlink()
    elif case == "not_gzip":
        images.write_bytes(small_idx_images(4))
    elif case == "truncated_gzip":
        whole = gzip.compress(small_idx_images(400))
        images.write_bytes(whole[:len(whole) // 2])
    elif case == "bad_magic":
        write_gz(images, small_idx_images(4, magic=0x801))
    elif case == "truncated_idx":
        write_gz(images, small_idx_images(4)[:-10])
    elif case == "count_mismatch":
        write_gz(labels, small_idx_labels([1, 2, 3]))
    elif case == "bad_label":
        write_gz(labels, small_idx_labels([1, 2, 12, 3]))
    elif case == "empty_file":
        images.write_bytes(b"")
    result = run([PROGRAM, "--data-dir", str(data_dir), *SMALL], tmp_path, timeout=60)
    one_line_error(result, *expect)


def test_bad_data_under_trainrun_fails_the_job(tmp_path):
    result = run([TRAINRUN, "--standalone", "--nproc-per-node=2", PROGRAM, "--data-dir",
                  str(tmp_path / "nowhere"), *SMALL], tmp_path, timeout=60)
    assert result.returncode == 1, result.stderr
    # The first worker to fail stops the job, so the other may not get to say it too.
    assert result.stderr.count("train-images-idx3-ubyte.gz: no such file") >= 1, result.stderr
    assert "Root Cause" in result.stderr and "exitcode  : 1" in result.stderr, result.stderr
    assert "terminate called" not in result.stderr


def test_bad_data_usage_errors(tmp_path):
    for args, fragment in ((["--epochs", "0"], "--epochs"), (["--bogus"], "--bogus"),
                           (["--epochs", "2", "--crash-once-at-epoch", "5"], "after the last")):
        result = run([PROGRAM, *args], tmp_path, timeout=30)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("fashion_mnist: ") and fragment in result.stderr


# --- every mode, same code ------------------------------------------------------------------

MODE_ARGS = ["--subset", "4096", "--test-subset", "1000", "--epochs", "2", "--threads", "1"]


def reference_torchrun():
    if not REFERENCE or not os.path.exists(REFERENCE):
        pytest.skip("the reference torchrun is not available")
    return [PYTHON, REFERENCE]


@pytest.mark.parametrize("mode", ["local", "trainrun", "torchrun", "num_workers"])
def test_modes_reach_the_same_accuracy_band(tmp_path, mode):
    name = f"mode_{mode}"
    args = [*MODE_ARGS, "--name", name]
    cmd = {
        "local": lambda: [PROGRAM, *args],
        "trainrun": lambda: [TRAINRUN, "--standalone", "--nproc-per-node=2", PROGRAM, *args],
        "torchrun": lambda: [*reference_torchrun(), *standalone_args(), "--nproc_per_node=2",
                             "--no_python", PROGRAM, *args],
        "num_workers": lambda: [PROGRAM, "--num-workers", "2", *args],
    }[mode]()
    result = run(cmd, tmp_path, timeout=600)
    if mode == "torchrun" and result.returncode != 0 and \
            "RendezvousConnectionError" in result.stderr:
        # The reference torchrun's own c10d rendezvous sometimes breaks on a loaded machine
        # ("Broken pipe" before or after the workers ran); that is not the program's doing.
        shutil.rmtree(tmp_path / "results", ignore_errors=True)
        result = run(cmd, tmp_path, timeout=600)
    out = ok(result)
    seen = epochs(out)
    assert [e[0] for e in seen] == [1, 2], out
    # A ResNet-18 on 4,096 images for 2 epochs: far above chance (10%), and loss going down.
    accuracy = final_accuracy(out)
    assert 0.55 <= accuracy <= 1.0, out
    assert seen[1][1] < seen[0][1], out
    lines = metrics_lines(tmp_path, name)
    assert [m["epoch"] for m in lines] == [1, 2]
    assert lines[-1]["test_accuracy"] == pytest.approx(accuracy, abs=1e-4)
    assert len(checkpoints(tmp_path, name)) == 1  # num_to_keep = 1
    workers = 1 if mode == "local" else 2
    assert f"{workers} worker(s)" in out


# --- resume after a crash -------------------------------------------------------------------

RESUME_ARGS = ["--subset", "512", "--test-subset", "200", "--epochs", "3", "--threads", "1",
               "--crash-once-at-epoch", "2"]


def check_resumed(out, tmp_path, name):
    assert "rank 1 exits at the start of epoch 2" in out, out
    assert "resuming after epoch 1" in out, out
    assert [e[0] for e in epochs(out)] == [1, 2, 3], out
    lines = metrics_lines(tmp_path, name)
    assert [m["epoch"] for m in lines] == [1, 2, 3]
    assert [m["training_iteration"] for m in lines] == [1, 2, 3]
    assert len(checkpoints(tmp_path, name)) == 1
    assert os.path.exists(tmp_path / "results" / name / "crashed_once")
    final_accuracy(out)


def test_resume_after_a_crash_under_trainrun(tmp_path):
    out = ok(run([TRAINRUN, "--standalone", "--nproc-per-node=2", "--max-restarts=1", PROGRAM,
                  *RESUME_ARGS, "--name", "resume"], tmp_path, timeout=400))
    check_resumed(out, tmp_path, "resume")


def test_resume_without_restarts_fails_with_the_workers_code(tmp_path):
    result = run([TRAINRUN, "--standalone", "--nproc-per-node=2", PROGRAM, *RESUME_ARGS,
                  "--name", "noresume"], tmp_path, timeout=400)
    assert result.returncode == 3, result.stderr
    assert [m["epoch"] for m in metrics_lines(tmp_path, "noresume")] == [1]


def test_resume_after_a_crash_with_num_workers(tmp_path):
    out = ok(run([PROGRAM, "--num-workers", "2", "--max-failures", "1", *RESUME_ARGS,
                  "--name", "resume_nw"], tmp_path, timeout=400))
    check_resumed(out, tmp_path, "resume_nw")


# --- the Python drop-in ---------------------------------------------------------------------

PY_ARGS = ["--subset", "2048", "--test-subset", "100", "--epochs", "1", "--max-steps", "4",
           "--log-every", "1", "--threads", "1", "--seed", "3"]


def step_losses(out):
    return [(int(m[2]), float(m[3])) for m in STEP_LINE.finditer(out)]


def test_python_same_losses_under_trainrun_and_torchrun(tmp_path):
    ours = ok(run([TRAINRUN, "--standalone", "--nproc-per-node=2", PY_EXAMPLE, *PY_ARGS],
                  tmp_path, timeout=300, env={"PYTHON_EXEC": PYTHON}))
    ref = ok(run([*reference_torchrun(), *standalone_args(), "--nproc_per_node=2", PY_EXAMPLE,
                  *PY_ARGS], tmp_path, timeout=300))
    a, b = step_losses(ours), step_losses(ref)
    assert [s for s, _ in a] == [1, 2, 3, 4], ours
    assert [s for s, _ in b] == [1, 2, 3, 4], ref
    for (_, x), (_, y) in zip(a, b):
        assert x == pytest.approx(y, rel=1e-5, abs=1e-6), (a, b)
    assert 1.0 < a[0][1] < 5.0  # an untrained 10-class model starts near ln(10)
    assert "2 worker(s)" in ours and "2 worker(s)" in ref
    # A different seed gives different losses: the comparison above can fail.
    other = ok(run([TRAINRUN, "--standalone", "--nproc-per-node=2", PY_EXAMPLE, *PY_ARGS[:-1],
                    "4"], tmp_path, timeout=300, env={"PYTHON_EXEC": PYTHON}))
    assert step_losses(other) != a


def test_python_bad_data_is_one_line(tmp_path):
    result = run([PYTHON, PY_EXAMPLE, "--data-dir", str(tmp_path / "nowhere")], tmp_path,
                 timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().startswith("train_fashion_mnist: ")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_smoke_use_gpu_without_a_gpu_is_refused_in_one_line(tmp_path):
    """--use-gpu where no GPU can be used (no CUDA build, or no device): one clear line, exit 1,
    in the C++ program and in its Python twin alike."""
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: scripts/gpu-check.sh trains on it")
    for cmd, prefix in (([PROGRAM, *SMALL, "--use-gpu"], "fashion_mnist: "),
                        ([PYTHON, PY_EXAMPLE, *SMALL, "--use-gpu"], "train_fashion_mnist: ")):
        result = run(cmd, tmp_path, timeout=100)
        assert result.returncode == 1, result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(prefix), result.stderr
        assert "GPU" in lines[0] or "CUDA" in lines[0], lines[0]


# --- state dicts shared with Python -------------------------------------------------------

def python_resnet18():
    """The Python example's ResNet-18 (torchvision's, with a 1-channel first convolution)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("train_fashion_mnist", PY_EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.resnet18()


def test_state_dict_model_pt_both_directions(tmp_path):
    import torch
    # C++ -> Python: the checkpoint's model.pt is a state dict of tensors for the Python model.
    ok(run([PROGRAM, *SMALL, "--name", "to_python"], tmp_path, timeout=100))
    [ckpt] = checkpoints(tmp_path, "to_python")
    # weights_only: what torch.load does by default from PyTorch 2.6 on, and the safe way to load.
    state = torch.load(tmp_path / "results" / "to_python" / ckpt / "model.pt", weights_only=True)
    assert isinstance(state, dict) and state
    assert all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items())
    python_resnet18().load_state_dict(state)  # strict: the same names and shapes, all of them

    # Python -> C++: a state dict saved by Python is where the C++ model starts.
    torch.manual_seed(3)
    saved = python_resnet18().state_dict()
    # A plain dict: LibTorch's unpickler reads an OrderedDict as None.
    torch.save(dict(saved), tmp_path / "python.pt")
    expected = sum(float(v.double().sum()) for v in saved.values())
    out = ok(run([PROGRAM, *SMALL, "--name", "from_python", "--init-model",
                  str(tmp_path / "python.pt")], tmp_path, timeout=100))
    found = re.findall(r"initial state dict .*: sum (-?[0-9.]+)", out)
    assert found, out
    assert float(found[0]) == pytest.approx(expected, rel=1e-6, abs=1e-3)
