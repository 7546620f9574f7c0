#!/usr/bin/python3
"""All-reduce bandwidth through Python's torch.distributed (Gloo, CPU): the same measurement as
allreduce_bench.cpp (same sizes, warm-up, iterations, timing and JSON lines), for
bench/allreduce_bandwidth.py to compare. Run it under a launcher:
`trainrun --standalone --nproc-per-node=4 /usr/bin/python3 bench/allreduce/allreduce_bench.py`.
"""
import argparse
import json
import sys
import time

import torch
import torch.distributed as dist


def iterations_for(nbytes):
    """About 256 MiB moved per size, at least 10 and at most 100 all-reduces (as the C++ side)."""
    return min(max((1 << 28) // nbytes, 10), 100)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def measure(nbytes, args):
    """One size; returns False when the first all-reduce gives a wrong sum."""
    rank, world = dist.get_rank(), dist.get_world_size()
    iters = args.iters if args.iters > 0 else iterations_for(nbytes)

    tensor = torch.full((nbytes // 4,), float(rank + 1), dtype=torch.float32)
    dist.barrier()
    dist.all_reduce(tensor)
    expected = float(world * (world + 1) // 2)
    if not bool(tensor.eq(expected).all()):
        print(f"allreduce_bench.py: rank {rank}: wrong sum for {nbytes} bytes "
              f"(expected {expected} everywhere)", file=sys.stderr)
        return False
    # Zeros stay zeros, so repeated in-place sums never overflow; adding them costs the same.
    tensor.zero_()
    for _ in range(1, args.warmup):
        dist.all_reduce(tensor)

    seconds = [0.0] * iters
    dist.barrier()
    for i in range(iters):
        start = time.perf_counter()
        dist.all_reduce(tensor)
        seconds[i] = time.perf_counter() - start
    # An all-reduce ends when its slowest rank is done: take each iteration's longest time.
    longest = torch.tensor(seconds, dtype=torch.float64)
    dist.all_reduce(longest, op=dist.ReduceOp.MAX)

    if rank == 0:
        t = median(longest.tolist())
        algbw = nbytes / t / 1e9
        busbw = algbw * 2.0 * (world - 1) / world
        print(json.dumps({"impl": "torch.distributed", "world_size": world, "bytes": nbytes,
                          "iters": iters, "warmup": args.warmup, "median_s": t,
                          "algbw_gbps": algbw, "busbw_gbps": busbw}), flush=True)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-bytes", type=int, default=1024)
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=0,
                    help="timed all-reduces per size; 0: about 256 MiB per size, 10 to 100")
    args = ap.parse_args()
    if args.min_bytes < 4 or args.min_bytes % 4 or args.factor < 2 or args.warmup < 1:
        ap.error("--min-bytes must be a positive multiple of 4, --factor at least 2, "
                 "--warmup at least 1")

    dist.init_process_group("gloo")  # env://, from the launcher's variables
    ok = True
    nbytes = args.min_bytes
    while ok and nbytes <= args.max_bytes:
        ok = measure(nbytes, args)
        nbytes *= args.factor
    dist.barrier()  # as the runtime's shutdown(): rank 0 hosts the store the others use
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
