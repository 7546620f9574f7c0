#!/usr/bin/python3
"""FashionMNIST on torchvision's ResNet-18 in plain PyTorch: DistributedDataParallel,
DistributedSampler, init_process_group from the launcher's environment. The same training as
apps/examples/fashion_mnist, for trainrun and torchrun alike:

    trainrun --standalone --nproc-per-node=2 apps/examples/fashion_mnist/train_fashion_mnist.py --epochs 2
    torchrun --standalone --nproc_per_node=2 apps/examples/fashion_mnist/train_fashion_mnist.py --epochs 2

Alone (no launcher variables) it trains in one process.
"""
import argparse
import gzip
import os
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

MEAN, STD = 0.28604, 0.32025
DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"


class DataError(Exception):
    pass


def read_idx(path, magic, dims):
    """The array in an IDX file (gzip or not), as a uint8 tensor of `dims` dimensions."""
    if not os.path.exists(path) and path.endswith(".gz") and os.path.exists(path[:-3]):
        path = path[:-3]
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as e:
        raise DataError(f"{path}: {e}") from None
    header = 4 + 4 * dims
    if len(data) < header or struct.unpack(">I", data[:4])[0] != magic:
        raise DataError(f"{path}: not an IDX file with magic {magic:#010x}")
    shape = struct.unpack(f">{dims}I", data[4:header])
    count = 1
    for n in shape:
        count *= n
    if len(data) != header + count:
        raise DataError(f"{path}: {len(data)} bytes, expected {header + count} for shape {shape}")
    return torch.frombuffer(bytearray(data[header:]), dtype=torch.uint8).reshape(shape)


def load_split(data_dir, prefix, limit):
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"), 0x803, 3)
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"), 0x801, 1)
    if images.shape[0] != labels.shape[0]:
        raise DataError(f"{data_dir}: {images.shape[0]} {prefix} images but {labels.shape[0]} labels")
    if limit:
        images, labels = images[:limit], labels[:limit]
    return images.unsqueeze(1), labels.long()


def normalize(pixels):
    return (pixels.float() / 255.0 - MEAN) / STD


def resnet18():
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    return model


# All-reduced in place and kept for the whole run: when Gloo's worker thread drops the last
# reference to a tensor Python created, it needs the GIL, and torch 1.13 can then deadlock at
# exit while the main thread tears the process group down.
_SUMS = torch.zeros(3, dtype=torch.float64)
DEVICE = torch.device("cpu")  # cuda:N with --use-gpu


def all_ranks_sum(values):
    _SUMS.zero_()
    _SUMS[:len(values)] = torch.tensor(values, dtype=torch.float64)
    if dist.is_initialized():
        if DEVICE.type == "cpu":
            dist.all_reduce(_SUMS)
        else:  # NCCL reduces GPU tensors only
            sums = _SUMS.to(DEVICE)
            dist.all_reduce(sums)
            _SUMS.copy_(sums)
    return _SUMS.tolist()[:len(values)]


def evaluate(model, images, labels, rank, world):
    model.eval()
    mine = torch.arange(rank, images.shape[0], world)
    correct = 0
    with torch.no_grad():
        for begin in range(0, mine.numel(), 1000):
            index = mine[begin:begin + 1000]
            predicted = model(normalize(images[index]).to(DEVICE)).argmax(1).cpu()
            correct += (predicted == labels[index]).sum().item()
    model.train()
    correct, total = all_ranks_sum([correct, mine.numel()])
    return correct / total


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=128, help="images per batch and worker")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--subset", type=int, default=0, help="first N training images")
    ap.add_argument("--test-subset", type=int, default=0, help="first N test images")
    ap.add_argument("--max-steps", type=int, default=0, help="steps per epoch and worker")
    ap.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=0, help="print the loss every N steps")
    ap.add_argument("--use-gpu", action="store_true",
                    help="one GPU per worker (cuda:LOCAL_RANK, cuda:0 when one is visible), NCCL")
    args = ap.parse_args()

    try:
        train_images, train_labels = load_split(args.data_dir, "train", args.subset)
        test_images, test_labels = load_split(args.data_dir, "t10k", args.test_subset)
    except DataError as e:
        sys.exit(f"train_fashion_mnist: {e}")

    global DEVICE
    launched = "RANK" in os.environ
    if args.use_gpu:
        if not torch.cuda.is_available():
            sys.exit("train_fashion_mnist: --use-gpu, but this PyTorch sees no GPU")
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        DEVICE = torch.device("cuda", 0 if torch.cuda.device_count() == 1 else local_rank)
        torch.cuda.set_device(DEVICE)
    if launched:
        # env:// : MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
        dist.init_process_group("nccl" if args.use_gpu else "gloo")
    rank = dist.get_rank() if launched else 0
    world = dist.get_world_size() if launched else 1
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    model = resnet18().to(DEVICE)
    if launched:
        model = DistributedDataParallel(model, device_ids=[DEVICE] if args.use_gpu else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    train_set = TensorDataset(train_images, train_labels)
    sampler = DistributedSampler(train_set, shuffle=True, seed=args.seed) if launched else None
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler,
                        shuffle=sampler is None)
    if rank == 0:
        print(f"training on {len(train_set)} images, testing on {test_images.shape[0]}, {world} "
              f"worker(s), batch {args.batch_size} per worker, {torch.get_num_threads()} "
              "thread(s) each", flush=True)

    test_accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        loss_sum, images, correct, steps = 0.0, 0, 0, 0
        start = time.perf_counter()
        for pixels, target in loader:
            if args.max_steps and steps == args.max_steps:
                break
            pixels, target = pixels.to(DEVICE), target.to(DEVICE)
            optimizer.zero_grad()
            output = model(normalize(pixels))
            loss = F.cross_entropy(output, target)
            loss.backward()
            optimizer.step()
            n = target.shape[0]
            loss_sum += loss.item() * n
            images += n
            correct += (output.argmax(1) == target).sum().item()
            steps += 1
            if rank == 0 and args.log_every and steps % args.log_every == 0:
                print(f"epoch {epoch} step {steps}: loss {loss.item():.6f}", flush=True)
        seconds = time.perf_counter() - start
        loss_sum, images, correct = all_ranks_sum([loss_sum, images, correct])
        test_accuracy = evaluate(model, test_images, test_labels, rank, world)
        if rank == 0:
            print(f"epoch {epoch}/{args.epochs}: loss {loss_sum / images:.4f}, train accuracy "
                  f"{100 * correct / images:.2f}%, test accuracy {100 * test_accuracy:.2f}%, "
                  f"{images / seconds:.0f} images/s ({seconds:.1f} s)", flush=True)
    if rank == 0:
        print(f"test accuracy: {100 * test_accuracy:.2f}% ({test_images.shape[0]} test images)",
              flush=True)
    if launched:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
