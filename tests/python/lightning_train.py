"""PyTorch Lightning's DDP Trainer on the CPU, as a user runs it under torchrun: a tiny regression
model, a few steps on 2 workers (devices=2: Lightning takes the ranks from torchelastic's
environment). Prints each rank's step count and logged loss, and the weights' checksum."""
import sys

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                         torch.nn.Linear(16, 1))

    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    L.seed_everything(0, verbose=False)
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(0))
    data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    trainer = L.Trainer(strategy="ddp", accelerator="cpu", devices=2, max_steps=4, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    model = Tiny()
    trainer.fit(model, data)
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    # One write per line: with python -u, print() writes the text and the newline separately.
    sys.stdout.write(f"rank {trainer.global_rank} of {trainer.world_size}: "
                     f"steps={trainer.global_step} "
                     f"train_loss={trainer.callback_metrics['train_loss'].item():.6f} "
                     f"weights={checksum:.6f}\n")


if __name__ == "__main__":
    main()
