"""A worker whose DataLoader is iterating when SIGUSR1 (the checkpoint signal) arrives.

Usage: loader_usr1.py DIR CONTEXT [SIGNALS]. Writes DIR/ready.RANK once its loader has delivered
a batch, waits (up to 120 s) for each of SIGNALS (a comma list, default SIGUSR1) while the
loader's processes are alive, reads every batch, and writes DIR/result.RANK: "<signals seen>
<items delivered>". Exits 3 when either is wrong.
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
    wanted = sys.argv[3].split(",") if len(sys.argv) > 3 else ["SIGUSR1"]
    rank = os.environ["RANK"]
    seen = []
    for name in wanted:
        signal.signal(getattr(signal, name), lambda number, _: seen.append(number))
    loader = DataLoader(Numbers(), batch_size=4, num_workers=1, multiprocessing_context=context)
    items = []
    for i, batch in enumerate(loader):
        items += batch.tolist()
        if i == 0:
            open(os.path.join(directory, "ready." + rank), "w").close()
            deadline = time.monotonic() + 120
            while len(seen) < len(wanted) and time.monotonic() < deadline:
                time.sleep(0.05)
    with open(os.path.join(directory, "result." + rank), "w") as f:
        f.write(f"{len(seen)} {len(items)}\n")
    expected = sorted(getattr(signal, name) for name in wanted)
    sys.exit(0 if sorted(seen) == expected and sorted(items) == list(range(ITEMS)) else 3)


if __name__ == "__main__":
    main()
