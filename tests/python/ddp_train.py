"""An unmodified torchrun training script: DDP, DistributedSampler and a torchvision model. Each
rank prints its last loss and a SHA-256 of its final state dict's bytes (names, then each tensor's
raw bytes in order): runs that trained the same way print the same digest."""
import hashlib
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group(backend="gloo", init_method="env://")
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,)))
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = DDP(torchvision.models.resnet18(num_classes=10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            if step == 2:
                break
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
    # Every rank must hold the same weights after synchronized steps.
    checksum = torch.tensor([sum(p.detach().double().sum().item() for p in model.parameters())])
    gathered = [torch.zeros_like(checksum) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, checksum)
    same = all(torch.allclose(g, gathered[0]) for g in gathered)
    digest = hashlib.sha256()
    for name, tensor in model.module.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    # One write per line: with python -u, print() writes the text and the newline separately.
    sys.stdout.write(f"rank {rank} local_rank {local_rank}: loss={loss.item():.4f} "
                     f"state_sha256={digest.hexdigest()} in_sync={same}\n")
    dist.destroy_process_group()
    raise SystemExit(0 if same else 1)


if __name__ == "__main__":
    main()
