"""A worker whose DataLoader is iterating when SIGUSR1 (the checkpoint signal) arrives.

Usage: loader_usr1.py DIR CONTEXT. Writes DIR/ready.RANK once its loader has delivered a batch,
waits (up to 120 s) for SIGUSR1 while the loader's processes are alive, reads every batch, and
writes DIR/result.RANK: "<signals seen> <items delivered>". Exits 3 when either is wrong.
"""
import os
import signal
import sys
import time

from torch.utils.data import DataLoader, Dataset

ITEMS = 32


class Numbers(Dataset):
    def __len__(self):
        return ITEMS

    def __getitem__(self, i):
        return i


def main():
    directory, context = sys.argv[1], sys.argv[2]
    rank = os.environ["RANK"]
    seen = []
    signal.signal(signal.SIGUSR1, lambda *_: seen.append(1))
    loader = DataLoader(Numbers(), batch_size=4, num_workers=1, multiprocessing_context=context)
    items = []
    for i, batch in enumerate(loader):
        items += batch.tolist()
        if i == 0:
            open(os.path.join(directory, "ready." + rank), "w").close()
            deadline = time.monotonic() + 120
            while not seen and time.monotonic() < deadline:
                time.sleep(0.05)
    with open(os.path.join(directory, "result." + rank), "w") as f:
        f.write(f"{len(seen)} {len(items)}\n")
    sys.exit(0 if len(seen) == 1 and sorted(items) == list(range(ITEMS)) else 3)


if __name__ == "__main__":
    main()
