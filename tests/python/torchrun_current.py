"""The torchrun of the interpreter that runs this file (`python -m torch.distributed.run`), as a
script path: the tests start every reference torchrun as `PYTHON SCRIPT ARGS...`."""
import runpy

runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
