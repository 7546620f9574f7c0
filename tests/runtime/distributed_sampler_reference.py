"""Prints the indices torch.utils.data.DistributedSampler yields, one JSON object a line.

Each argument is a case: SIZE,REPLICAS,RANK,SHUFFLE,SEED,EPOCH,DROP_LAST (SHUFFLE and DROP_LAST 0
or 1). The C++ sampler's test compares its indices with these.
"""
import json
import sys

from torch.utils.data import DistributedSampler

for case in sys.argv[1:]:
    size, replicas, rank, shuffle, seed, epoch, drop_last = (int(v) for v in case.split(","))
    sampler = DistributedSampler(range(size), num_replicas=replicas, rank=rank,
                                 shuffle=bool(shuffle), seed=seed, drop_last=bool(drop_last))
    sampler.set_epoch(epoch)
    print(json.dumps({"case": case, "indices": list(sampler)}))
