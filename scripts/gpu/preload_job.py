"""A worker of scripts/gpu-check.sh's warm-start checks, on one GPU.

    trainrun --nproc-per-node=N [--preload=torch] preload_job.py nccl|gloo STEPS

Prints whether torch was imported before the script ran (a worker forked from a --preload
template), whether CUDA was initialised then (never: the template refuses to fork after that),
and each step's loss of a small model trained on cuda:0, gradients all-reduced over the job's
process group (NCCL with one rank, since NCCL refuses two ranks on one GPU; Gloo through the CPU
with several). The same job with and without --preload prints the same losses.
"""
import sys

preloaded = "torch" in sys.modules
import os  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

backend, steps = sys.argv[1], int(sys.argv[2])
rank = int(os.environ["RANK"])
print(f"rank {rank}: torch preloaded {preloaded}, CUDA initialised at start "
      f"{torch.cuda.is_initialized()}", flush=True)
torch.cuda.set_device(0)
dist.init_process_group(backend)
world = dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).cuda()
optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
generator = torch.Generator().manual_seed(1000 + rank)
for step in range(steps):
    x = torch.randn(32, 64, generator=generator).cuda()
    y = torch.randn(32, 8, generator=generator).cuda()
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimiser.zero_grad()
    loss.backward()
    for p in model.parameters():
        grad = p.grad if backend == "nccl" else p.grad.cpu()
        dist.all_reduce(grad)
        p.grad.copy_(grad / world)
    optimiser.step()
    total = loss.detach().clone() if backend == "nccl" else loss.detach().cpu()
    dist.all_reduce(total)
    if rank == 0:
        print(f"step {step}: loss {total.item() / world:.6f}", flush=True)
dist.destroy_process_group()
