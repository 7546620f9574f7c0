"""A Gloo job that stops in the scenario named by argv[1] (test_collectives_torch2.py); each rank
touches argv[2]/<rank> once it is where the scenario leaves it, and waits there until argv[3]
exists, then ends."""
import os
import sys
import time

import torch
import torch.distributed as dist

scenario, ready, release = sys.argv[1], sys.argv[2], sys.argv[3]


def arrived():
    open(os.path.join(ready, os.environ["RANK"]), "w").close()


def stuck_here():
    arrived()
    while not os.path.exists(release):
        time.sleep(0.05)
    os._exit(0)


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
# Every rank takes part in making a group; only its members use it.
pair = dist.new_group([1, 2]) if scenario == "peer_wait" else None
grad = torch.ones(4096)
for _ in range(3):
    dist.all_reduce(grad)

if scenario == "behind":
    # The last rank never reaches the all_reduce the others wait in.
    if rank == world - 1:
        stuck_here()
    work = dist.all_reduce(grad, async_op=True)
elif scenario == "op_mismatch":
    # The last rank gathers where the others reduce.
    if rank == world - 1:
        work = dist.all_gather([torch.zeros(8) for _ in range(world)], torch.ones(8),
                               async_op=True)
    else:
        work = dist.all_reduce(grad, async_op=True)
elif scenario == "size_mismatch":
    # Rank 1 broadcasts half of what the others expect (Gloo lets a receiver get less).
    work = dist.broadcast(grad if rank != 1 else torch.ones(2048), src=1, async_op=True)
elif scenario == "peer_wait":
    # Rank 2 stops in its own code; rank 1 waits for it inside the pair's all_reduce, and so
    # never enters the default group's, which rank 0 waits in.
    if rank == 2:
        stuck_here()
    if rank == 1:
        work = dist.all_reduce(torch.ones(16), group=pair, async_op=True)
    else:
        work = dist.all_reduce(grad, async_op=True)
elif scenario == "healthy":
    dist.barrier()
    stuck_here()
# The main thread waits for the collective as a training step would; `arrived` first, from here,
# since a rank blocked in the wait cannot say it got there.
arrived()
work.wait()
stuck_here()
