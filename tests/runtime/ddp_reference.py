"""Trains the runtime test worker's MLP with torch's DistributedDataParallel (Gloo, 2 ranks).

ddp_reference.py VARIANT INITIAL STEPS OUT: starts from the parameters and buffers in INITIAL (one
number a line, parameters() then buffers(), as runtime_test_worker writes them), trains as the
worker's VARIANT ("plain" or "batchnorm") does (each rank on its half of a fixed batch, SGD lr 0.1,
MSE) and writes rank 0's parameters and buffers to OUT in the same format.
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

WORLD = 2


def model_from(variant, values):
    if variant == "batchnorm":
        model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 1))
    else:
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3), nn.Tanh(),
                              nn.Linear(3, 1))
    flat = torch.tensor(values, dtype=torch.float64)
    offset = 0
    with torch.no_grad():
        for p in [*model.parameters(), *model.buffers()]:
            p.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
    assert offset == len(values), (offset, len(values))
    return model


def worker(rank, init_file, variant, values, steps, out):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=WORLD)
    model = nn.parallel.DistributedDataParallel(model_from(variant, values))
    torch.manual_seed(7)
    inputs = torch.randn(16, 4)
    targets = torch.randn(16, 1)
    per_rank = 16 // WORLD
    x = inputs[rank * per_rank:(rank + 1) * per_rank]
    y = targets[rank * per_rank:(rank + 1) * per_rank]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    if rank == 0:
        with open(out, "w") as f:
            for p in [*model.module.parameters(), *model.module.buffers()]:
                for v in p.detach().double().reshape(-1).tolist():
                    f.write("%.9g\n" % v)
    dist.destroy_process_group()


def main():
    variant, initial, steps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    with open(initial) as f:
        values = [float(line) for line in f if line.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(os.path.join(tmp, "init"), variant, values, steps, out),
                 nprocs=WORLD)


if __name__ == "__main__":
    main()
