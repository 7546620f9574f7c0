"""A job for --hang-timeout (argv[1] the mode, argv[2] seconds where it takes them):
  stuck SECONDS    rank 2 sleeps in stuck_here() while every other rank blocks in a Gloo
                   all_reduce (which waits for rank 2), at most SECONDS
  sleep SECONDS    every rank sleeps in stuck_here() for SECONDS (no torch)
  compute SECONDS  prints nothing, computes through ever deeper frames for SECONDS, then ends
  flat SECONDS     two ranks all-reduce, compute in one line for SECONDS without printing (a
                   torch matmul), then all-reduce again and end: the stack never moves
  pdb              stops at breakpoint(), then ends once pdb is told to continue
  chatty SECONDS   prints a line every second (print(), no flush) for SECONDS, then ends
  heartbeat SECONDS  prints nothing, touches $TRAINRUN_HEARTBEAT_FILE every second (as the C++
                   runtime's report() does) for SECONDS, then ends"""
import os
import sys
import time

MODE, SECONDS = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 0
RANK = int(os.environ["RANK"])


def stuck_here():
    time.sleep(SECONDS)


def all_reduce_with_rank_2():
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if RANK == 2:
        stuck_here()
    t = torch.ones(1)
    dist.all_reduce(t)


def deeper(level, until):
    # Half a second of work at each depth: two looks at the stack seconds apart never agree.
    end = time.monotonic() + 0.5
    x = 0
    while time.monotonic() < end:
        x += level
    if time.monotonic() < until:
        deeper(level + 1, until)


def flat(seconds):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    a = torch.rand(256, 256)
    end = time.monotonic() + seconds
    while time.monotonic() < end: a = torch.tanh(a @ a)  # noqa: E701 (one line: one place)
    dist.all_reduce(t)
    dist.destroy_process_group()


if MODE == "stuck":
    all_reduce_with_rank_2()
elif MODE == "sleep":
    stuck_here()
elif MODE == "compute":
    deeper(0, time.monotonic() + SECONDS)
elif MODE == "flat":
    flat(SECONDS)
elif MODE == "pdb":
    breakpoint()
elif MODE == "chatty":
    for i in range(int(SECONDS)):
        print(f"rank {RANK}: step {i}")
        time.sleep(1)
elif MODE == "heartbeat":
    for i in range(int(SECONDS)):
        os.utime(os.environ["TRAINRUN_HEARTBEAT_FILE"])
        time.sleep(1)
print(f"done rank {RANK}", flush=True)
