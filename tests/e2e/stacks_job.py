"""A job for `trainrun --stacks`: rank 1 (or $STUCK_RANK) waits in stuck_here(), every other rank in
wait_for_others(), until RELEASE exists (argv[1]); each says it is in place with a file in READY
(argv[2]) and ends with "done rank N"."""
import os
import sys
import time

RELEASE, READY = sys.argv[1], sys.argv[2]
RANK = int(os.environ["RANK"])
STUCK_RANK = int(os.environ.get("STUCK_RANK", "1"))


def ready():
    open(os.path.join(READY, str(RANK)), "w").close()


def stuck_here():
    ready()
    while not os.path.exists(RELEASE):
        time.sleep(0.05)


def wait_for_others():
    ready()
    while not os.path.exists(RELEASE):
        time.sleep(0.05)


if RANK == STUCK_RANK:
    stuck_here()
else:
    wait_for_others()
print(f"done rank {RANK}", flush=True)
