"""All-reduces rank+1 over Gloo and checks the sum on every rank (a torchrun-style script)."""
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
expected = world * (world + 1) / 2
# One write per line: with python -u, print() writes the text and the newline separately.
sys.stdout.write(f"rank {rank}/{world}: sum={t.item():.0f} expected={expected:.0f}\n")
dist.destroy_process_group()
raise SystemExit(0 if t.item() == expected else 1)
