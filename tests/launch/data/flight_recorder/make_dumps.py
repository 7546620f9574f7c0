"""Real flight-recorder dumps for collectives_test.cpp, one directory per scenario.

Run it with a Python that has PyTorch 2.x (Gloo is enough, no GPU):

    python make_dumps.py [SCENARIO...]

Each scenario runs under torch's own launcher (python -m torch.distributed.run --standalone) with
the flight recorder on (TORCH_FR_BUFFER_SIZE), and each rank writes SCENARIO/rank_<rank>.json: the
JSON of torch._C._distributed_c10d._dump_fr_trace_json(includeCollectives=True, onlyActive=False),
taken by a thread of its own a few seconds in, while the main thread is wherever the scenario left
it (blocked in a Gloo wait releases the GIL). The rank then ends with os._exit, without waiting for
the others. The dumps are kept whole, only indented: each scenario runs a handful of collectives,
so each file is a few kilobytes.
"""

import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DUMP_AFTER_S = 4.0

# name: number of ranks
SCENARIOS = {
    "two_ranks_behind": 2,
    "four_ranks_behind": 4,
    "op_mismatch": 4,
    "size_mismatch": 2,
    "healthy": 4,
    "subgroup": 4,
    "inside": 2,
}


def stuck_here():
    time.sleep(3600)


def dump_later(scenario, rank, after_s=DUMP_AFTER_S):
    import torch

    def write():
        time.sleep(after_s)
        text = torch._C._distributed_c10d._dump_fr_trace_json(
            includeCollectives=True, onlyActive=False
        )
        if isinstance(text, bytes):
            text = text.decode()
        path = os.path.join(HERE, scenario, f"rank_{rank}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(json.loads(text), f, indent=1, sort_keys=True)
            f.write("\n")
        os.rename(path + ".tmp", path)
        os._exit(0)

    threading.Thread(target=write, daemon=True).start()


def steps(torch, dist, n, group=None):
    """n training steps' worth of collectives, all completed."""
    grad = torch.ones(4096, dtype=torch.float32)
    for _ in range(n):
        dist.all_reduce(grad, group=group)


def worker(scenario):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    world = dist.get_world_size()
    grad = torch.ones(4096, dtype=torch.float32)
    params = torch.zeros(16, dtype=torch.bfloat16)
    if scenario != "subgroup":
        dist.broadcast(params, src=0)
        steps(torch, dist, 4)
    if scenario != "inside":
        dump_later(scenario, rank)

    if scenario in ("two_ranks_behind", "four_ranks_behind"):
        # The last rank never reaches the step's all_reduce that the others wait in.
        if rank == world - 1:
            stuck_here()
        dist.all_reduce(grad)
    elif scenario == "op_mismatch":
        # Rank 3 gathers where the others reduce: each waits for what the others never send.
        if rank == 3:
            shard = torch.ones(8, dtype=torch.float32)
            dist.all_gather([torch.zeros(8) for _ in range(world)], shard)
        else:
            dist.all_reduce(grad)
    elif scenario == "size_mismatch":
        # Rank 1 broadcasts half of what rank 0 expects. Gloo lets it through (a receiver may get
        # less than its buffer holds); an all_reduce of different sizes aborts the rank that gets
        # more than it expects before anything could dump it.
        dist.broadcast(grad if rank == 0 else torch.ones(2048, dtype=torch.float32), src=1)
    elif scenario == "healthy":
        # Every rank done with the same collective, then busy elsewhere.
        dist.barrier()
        stuck_here()
    elif scenario == "subgroup":
        # Two pairs, each with its own group; rank 3 never reaches its pair's all_reduce, and ranks
        # 0 and 1 idle elsewhere. They have nothing of group "2" in their dumps: they say nothing
        # about it.
        first = dist.new_group([0, 1], group_desc="pair_a")
        second = dist.new_group([2, 3], group_desc="pair_b")
        pair = first if rank < 2 else second
        steps(torch, dist, 2)
        steps(torch, dist, 3, group=pair)
        if rank != 2:
            stuck_here()
        dist.all_reduce(grad, group=pair)
    elif scenario == "inside":
        # Both ranks inside one all_reduce, dumped while it runs: 512 MiB each takes about a
        # second over loopback, the dumps are taken a fifth of a second in.
        big = torch.ones(128 * 1024 * 1024, dtype=torch.float32)
        dist.barrier()
        dump_later(scenario, rank, after_s=0.2)
        dist.all_reduce(big)
    stuck_here()


def run(scenario):
    out = os.path.join(HERE, scenario)
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(out):
        os.remove(os.path.join(out, name))
    env = dict(os.environ, TORCH_FR_BUFFER_SIZE="2000", MAKE_DUMPS_SCENARIO=scenario)
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={SCENARIOS[scenario]}", os.path.abspath(__file__),
    ]
    subprocess.run(command, env=env, timeout=120, check=True)
    written = sorted(os.listdir(out))
    expected = [f"rank_{r}.json" for r in range(SCENARIOS[scenario])]
    if written != expected:
        sys.exit(f"make_dumps.py: {scenario}: wrote {written}, expected {expected}")
    if scenario == "inside":
        for name in written:
            with open(os.path.join(out, name)) as f:
                if json.load(f)["entries"][-1]["retired"]:
                    sys.exit(f"make_dumps.py: inside: the all_reduce ended before {name} was "
                             "taken; run it again (on an idle machine)")
    print(f"{scenario}: {', '.join(written)}")


if __name__ == "__main__":
    if "MAKE_DUMPS_SCENARIO" in os.environ:
        worker(os.environ["MAKE_DUMPS_SCENARIO"])
    else:
        for scenario in sys.argv[1:] or SCENARIOS:
            run(scenario)
