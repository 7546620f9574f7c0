"""A module that initialises CUDA when imported: `--preload=torch,cuda_at_import` must not fork
from it (scripts/gpu-check.sh)."""
import torch

torch.cuda.init()
