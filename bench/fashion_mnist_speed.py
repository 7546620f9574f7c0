#!/usr/bin/python3
"""FashionMNIST training: images per second per epoch of the C++ example
(apps/examples/fashion_mnist) against the same training in Python
(apps/examples/fashion_mnist/train_fashion_mnist.py), both under `trainrun --standalone` with the same
workers, threads per worker and data, side by side in one run. With --accuracy, instead the full run
that shows it learns: 2 epochs on all 60,000 images with 2 workers, and its test accuracy
(target: at least 85%).

Usage: bench/fashion_mnist_speed.py [--build DIR] [--python PATH] [--workers N] [--threads N]
                                    [--subset N] [--epochs N] [--runs N] [--accuracy] [--json PATH]
The PyTorch 2.x configuration: --build build-pypi --python .venv-pypi/bin/python (its own
section of docs/benchmarks.md, beside 1.13's).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_doc import (ROOT, add_json_option, heading, median, provenance, publish,  # noqa: E402
                       record, spread, torch_config)

PYTHON = "/usr/bin/python3"
PY_EXAMPLE = os.path.join(ROOT, "apps", "examples", "fashion_mnist", "train_fashion_mnist.py")
EPOCH = re.compile(r"epoch (\d+)/\d+: loss ([0-9.]+), train accuracy ([0-9.]+)%, "
                   r"test accuracy ([0-9.]+)%, (\d+) images/s \(([0-9.]+) s\)")
FINAL = re.compile(r"^test accuracy: ([0-9.]+)%", re.M)


def train(cmd, storage):
    """Runs one training job; returns (per-epoch [(epoch, loss, test acc, images/s, s)],
    final test accuracy, wall seconds)."""
    env = dict(os.environ, TRAINRUN_STORAGE_PATH=storage)
    print("$", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    out = r.stdout + r.stderr
    if r.returncode != 0:
        sys.exit(f"fashion_mnist_speed: exited {r.returncode}:\n{out}")
    epochs = [(int(m[1]), float(m[2]), float(m[4]), float(m[5]), float(m[6]))
              for m in EPOCH.finditer(out)]
    final = FINAL.findall(out)
    if not epochs or len(final) != 1:
        sys.exit(f"fashion_mnist_speed: no epoch or test accuracy lines in:\n{out}")
    for e in epochs:
        print(f"  epoch {e[0]}: loss {e[1]:.4f}, test accuracy {e[2]:.2f}%, {e[3]:.0f} images/s",
              flush=True)
    return epochs, float(final[0]), wall


def one_run(epochs, final, wall):
    return {"epochs": [{"epoch": e[0], "loss": e[1], "test_accuracy": e[2], "images_per_s": e[3],
                        "epoch_s": e[4]} for e in epochs], "test_accuracy": final, "wall_s": wall}


def speed(args, program, trainrun, storage):
    common = ["--epochs", str(args.epochs), "--threads", str(args.threads), "--subset",
              str(args.subset), "--test-subset", str(args.test_subset)]
    launch = [trainrun, "--standalone", f"--nproc-per-node={args.workers}"]
    cpp_runs, py_runs = [], []
    # Alternating, so a change in the machine's load falls on both programs alike.
    for i in range(args.runs):
        cpp_runs.append(one_run(*train([*launch, program, *common, "--name", f"speed_cpp_{i}"],
                                       storage)))
        py_runs.append(one_run(*train([*launch, "--no-python", args.python, PY_EXAMPLE, *common],
                                      storage)))
    return {"cpp": cpp_runs, "python": py_runs}


def per_epoch(runs, field):
    """Each epoch's values of `field` over the runs."""
    return [[run["epochs"][i][field] for run in runs] for i in range(len(runs[0]["epochs"]))]


def render(rec):
    s, res = rec["settings"], rec["results"]
    cpp_speed, py_speed = per_epoch(res["cpp"], "images_per_s"), per_epoch(res["python"],
                                                                            "images_per_s")
    cpp_loss, py_loss = per_epoch(res["cpp"], "loss"), per_epoch(res["python"], "loss")
    rows = ["| epoch | C++ images/s | Python images/s | C++ / Python | C++ loss | Python loss |",
            "|---|---:|---:|---:|---:|---:|"]
    for i, (c, p) in enumerate(zip(cpp_speed, py_speed)):
        rows.append(f"| {i + 1} | {spread(c, '{:.0f}')} | {spread(p, '{:.0f}')} | "
                    f"{median(c) / median(p):.2f}x | {spread(cpp_loss[i], '{:.4f}')} | "
                    f"{spread(py_loss[i], '{:.4f}')} |")
    rows.append(f"| test accuracy | {spread([r['test_accuracy'] for r in res['cpp']], '{:.2f}%')} | "
                f"{spread([r['test_accuracy'] for r in res['python']], '{:.2f}%')} | | | |")
    rows.append(f"| job wall time | {spread([r['wall_s'] for r in res['cpp']], '{:.0f} s')} | "
                f"{spread([r['wall_s'] for r in res['python']], '{:.0f} s')} | | | |")
    runs = s["runs"]
    how = ("each figure is the median (min–max) over the runs" if runs > 1
           else "one run each, as a job takes over a minute")
    return heading("FashionMNIST training speed: C++ example against Python" + s["title"],
                   rec) + f"""
`bench/fashion_mnist_speed.py` — the ResNet-18 FashionMNIST training of
`apps/examples/fashion_mnist` (LibTorch, libtrainrun_runtime) and of
`apps/examples/fashion_mnist/train_fashion_mnist.py` (PyTorch DDP, torchvision's resnet18), each as
`trainrun --standalone --nproc-per-node={s['workers']} PROGRAM --epochs {s['epochs']}
--threads {s['threads']} --subset {s['subset']} --test-subset {s['test_subset']}`: {s['workers']}
workers of {s['threads']} thread(s), batch 128 per worker, Adam 1e-3, the first {s['subset']}
training images. {runs} run(s) of each program, alternating, in one run of the benchmark; {how}.
Images/s counts the training images of all workers in an epoch over that epoch's
training time (without evaluation). {s['torch']}. Target: the C++ program at least as fast.

""" + "\n".join(rows) + "\n\n" + provenance(rec) + "\n"


def accuracy(args, program, trainrun, storage):
    cmd = [trainrun, "--standalone", "--nproc-per-node=2", program, "--epochs", "2"]
    return one_run(*train([*cmd, "--name", "accuracy"], storage))


def render_accuracy(rec):
    res = rec["results"]
    final = res["test_accuracy"]
    rows = ["| epoch | loss | test accuracy | images/s | epoch time |", "|---|---:|---:|---:|---:|"]
    for e in res["epochs"]:
        rows.append(f"| {e['epoch']} | {e['loss']:.4f} | {e['test_accuracy']:.2f}% | "
                    f"{e['images_per_s']:.0f} | {e['epoch_s']:.0f} s |")
    verdict = "meets" if final >= 85 else "MISSES"
    return heading("FashionMNIST: 2 epochs with 2 workers", rec) + f"""
`bench/fashion_mnist_speed.py --accuracy` runs
`trainrun --standalone --nproc-per-node=2 fashion_mnist --epochs 2`: all 60,000 training
images, 2 workers (1 thread each, `OMP_NUM_THREADS=1` from trainrun), batch 128 per worker,
Adam 1e-3; evaluated on all 10,000 test images after each epoch. One run (it takes minutes).
Final test accuracy **{final:.2f}%** ({verdict} the 85% target), in {res['wall_s'] / 60:.1f}
minutes.

""" + "\n".join(rows) + "\n\n" + provenance(rec) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--subset", type=int, default=10240)
    ap.add_argument("--test-subset", type=int, default=1000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--runs", type=int, default=2, help="runs of each program, alternating")
    ap.add_argument("--accuracy", action="store_true",
                    help="instead train 2 full epochs with 2 workers and record the test accuracy")
    ap.add_argument("--python", default=PYTHON, help="the Python (and its torch) of the twin")
    add_json_option(ap)
    args = ap.parse_args()
    args.torch = torch_config(args.python)
    section = args.torch[1]

    trainrun = os.path.join(args.build, "apps", "trainrun", "trainrun")
    program = os.path.join(args.build, "apps", "examples", "fashion_mnist", "fashion_mnist")
    for path in (trainrun, program):
        if not os.access(path, os.X_OK):
            sys.exit(f"fashion_mnist_speed: {path} is not built (cmake --build {args.build})")

    described, _, title = args.torch
    with tempfile.TemporaryDirectory(prefix="fashion_mnist_bench_") as storage:
        if args.accuracy:
            run = accuracy(args, program, trainrun, storage)
            publish("fashion_mnist_accuracy" + section, record(
                "fashion_mnist_accuracy" + section, run, {"torch": described}), args.json)
            if run["test_accuracy"] < 85:
                sys.exit(f"fashion_mnist_speed: test accuracy {run['test_accuracy']:.2f}% is "
                         "below 85%")
        else:
            runs = speed(args, program, trainrun, storage)
            publish("fashion_mnist_speed" + section, record("fashion_mnist_speed" + section, runs, {
                "workers": args.workers, "threads": args.threads, "subset": args.subset,
                "test_subset": args.test_subset, "epochs": args.epochs, "runs": args.runs,
                "torch": described, "title": title}), args.json)

if __name__ == "__main__":
    main()
