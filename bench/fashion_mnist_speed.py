#!/usr/bin/python3
"""FashionMNIST training: images per second per epoch of the C++ example
(apps/examples/fashion_mnist) against the same training in Python
(apps/examples/fashion_mnist/train_fashion_mnist.py), both under `trainrun --standalone` with the same
workers, threads per worker and data, side by side in one run. With --accuracy, instead the full run
that shows it learns: 2 epochs on all 60,000 images with 2 workers, and its test accuracy
(target: at least 85%).

Usage: bench/fashion_mnist_speed.py [--build DIR] [--python PATH] [--workers N] [--threads N]
                                    [--subset N] [--epochs N] [--runs N] [--accuracy] [--no-doc]
                                    [--json PATH]
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
from bench_doc import (ROOT, add_json_option, machine, median, torch_config,  # noqa: E402
                       write_json, write_section)

PYTHON = "/usr/bin/python3"
PY_EXAMPLE = os.path.join(ROOT, "apps", "examples", "fashion_mnist", "train_fashion_mnist.py")
EPOCH = re.compile(r"epoch (\d+)/\d+: loss ([0-9.]+), train accuracy ([0-9.]+)%, "
                   r"test accuracy ([0-9.]+)%, (\d+) images/s \(([0-9.]+) s\)")
FINAL = re.compile(r"^test accuracy: ([0-9.]+)%", re.M)


def load():
    return "load average {:.1f} / {:.1f} / {:.1f} (1/5/15 min) when it ended".format(*os.getloadavg())


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


def per_epoch_median(runs):
    """[(epoch, loss, test acc, images/s, s)] with each field the median over the runs."""
    return [tuple(median(values) for values in zip(*epoch)) for epoch in zip(*runs)]


def speed(args, program, trainrun, storage):
    common = ["--epochs", str(args.epochs), "--threads", str(args.threads), "--subset",
              str(args.subset), "--test-subset", str(args.test_subset)]
    launch = [trainrun, "--standalone", f"--nproc-per-node={args.workers}"]
    cpp_runs, py_runs = [], []
    # Alternating, so a change in the machine's load falls on both programs alike.
    for i in range(args.runs):
        cpp_runs.append(train([*launch, program, *common, "--name", f"speed_cpp_{i}"], storage))
        py_runs.append(train([*launch, "--no-python", args.python, PY_EXAMPLE, *common], storage))
    cpp = per_epoch_median([r[0] for r in cpp_runs])
    py = per_epoch_median([r[0] for r in py_runs])

    rows = ["| epoch | C++ images/s | Python images/s | C++ / Python | C++ loss | Python loss |",
            "|---|---|---|---|---|---|"]
    for c, p in zip(cpp, py):
        rows.append(f"| {c[0]:.0f} | {c[3]:.0f} | {p[3]:.0f} | {c[3] / p[3]:.2f}x | {c[1]:.4f} | "
                    f"{p[1]:.4f} |")
    rows.append(f"| test accuracy | {median([r[1] for r in cpp_runs]):.2f}% | "
                f"{median([r[1] for r in py_runs]):.2f}% | | | |")
    rows.append(f"| job wall time | {median([r[2] for r in cpp_runs]):.0f} s | "
                f"{median([r[2] for r in py_runs]):.0f} s | | | |")
    described, _, title = args.torch
    body = f"""## FashionMNIST training speed: C++ example against Python{title}

`bench/fashion_mnist_speed.py` — the ResNet-18 FashionMNIST training of
`apps/examples/fashion_mnist` (LibTorch, libtrainrun_runtime) and of
`apps/examples/fashion_mnist/train_fashion_mnist.py` (PyTorch DDP, torchvision's resnet18), each as
`trainrun --standalone --nproc-per-node={args.workers} PROGRAM --epochs {args.epochs}
--threads {args.threads} --subset {args.subset} --test-subset {args.test_subset}`: {args.workers}
workers of {args.threads} thread(s), batch 128 per worker, Adam 1e-3, the first {args.subset}
training images. {args.runs} runs of each program, alternating, in one run of the benchmark; each
figure is the median over the runs. Images/s counts the training images of all workers in an
epoch over that epoch's training time (without evaluation). {described}.
Machine: {machine()}; {load()}. Target: the C++ program at least as fast.

""" + "\n".join(rows)
    return body, cpp, py


def accuracy(args, program, trainrun, storage):
    cmd = [trainrun, "--standalone", "--nproc-per-node=2", program, "--epochs", "2"]
    epochs, final, wall = train([*cmd, "--name", "accuracy"], storage)
    rows = ["| epoch | loss | test accuracy | images/s | epoch time |", "|---|---|---|---|---|"]
    for e in epochs:
        rows.append(f"| {e[0]} | {e[1]:.4f} | {e[2]:.2f}% | {e[3]:.0f} | {e[4]:.0f} s |")
    verdict = "meets" if final >= 85 else "MISSES"
    body = f"""## FashionMNIST: 2 epochs with 2 workers

`bench/fashion_mnist_speed.py --accuracy` runs
`trainrun --standalone --nproc-per-node=2 fashion_mnist --epochs 2`: all 60,000 training
images, 2 workers (1 thread each, `OMP_NUM_THREADS=1` from trainrun), batch 128 per worker,
Adam 1e-3; evaluated on all 10,000 test images after each epoch. Final test accuracy
**{final:.2f}%** ({verdict} the 85% target), in {wall / 60:.1f} minutes. Machine: {machine()};
{load()}.

""" + "\n".join(rows)
    return body, final


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
    ap.add_argument("--no-doc", action="store_true")
    add_json_option(ap)
    args = ap.parse_args()
    args.torch = torch_config(args.python)
    section = args.torch[1]

    trainrun = os.path.join(args.build, "apps", "trainrun", "trainrun")
    program = os.path.join(args.build, "apps", "examples", "fashion_mnist", "fashion_mnist")
    for path in (trainrun, program):
        if not os.access(path, os.X_OK):
            sys.exit(f"fashion_mnist_speed: {path} is not built (cmake --build {args.build})")

    with tempfile.TemporaryDirectory(prefix="fashion_mnist_bench_") as storage:
        if args.accuracy:
            body, final = accuracy(args, program, trainrun, storage)
            if not args.no_doc:
                write_section("fashion_mnist_accuracy" + section, body)
            print(body, flush=True)
            if final < 85:
                sys.exit(f"fashion_mnist_speed: test accuracy {final:.2f}% is below 85%")
        else:
            body, cpp, py = speed(args, program, trainrun, storage)
            write_json(args.json, "fashion_mnist_speed" + section, {
                name: [{"epoch": e[0], "loss": e[1], "test_accuracy": e[2], "images_per_s": e[3],
                        "epoch_s": e[4]} for e in epochs] for name, epochs in (("cpp", cpp),
                                                                               ("python", py))},
                workers=args.workers, threads=args.threads, subset=args.subset,
                test_subset=args.test_subset, epochs=args.epochs, runs=args.runs)
            if not args.no_doc:
                write_section("fashion_mnist_speed" + section, body)
            print(body, flush=True)


if __name__ == "__main__":
    main()
