"""Writes this worker's environment as JSON to <dir>/<RANK>.json (argv[1] is the directory)."""
import json
import os
import sys

with open(os.path.join(sys.argv[1], os.environ["RANK"] + ".json"), "w") as f:
    json.dump(dict(os.environ), f)
