"""Hugging Face's Trainer on the CPU (Gloo), as a user runs it under torchrun: a BERT of 2 layers
and hidden size 32 built from its config, classifying random token ids, a few steps on each
worker. argv[1]: the output directory. Prints each rank's steps, its logged losses and the
weights' checksum."""
import os
import sys

import torch
from transformers import (BertConfig, BertForSequenceClassification, Trainer, TrainingArguments,
                          set_seed)


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, items=32, length=16):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 100, (items, length), generator=g)
        self.labels = torch.randint(0, 2, (items,), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def main():
    set_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=32)
    model = BertForSequenceClassification(config)
    args = TrainingArguments(output_dir=sys.argv[1], max_steps=4, per_device_train_batch_size=4,
                             learning_rate=1e-3, logging_steps=1, report_to="none",
                             save_strategy="no", use_cpu=True, ddp_backend="gloo",
                             ddp_find_unused_parameters=False, disable_tqdm=True, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=RandomTokens())
    result = trainer.train()
    losses = " ".join(f"{h['loss']:.6f}" for h in trainer.state.log_history if "loss" in h)
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    sys.stdout.write(f"rank {os.environ['RANK']} of {args.world_size}: "
                     f"steps={result.global_step} losses={losses} weights={checksum:.6f}\n")
    # The Trainer leaves the process group to the interpreter's exit, where torch 2.x's Gloo
    # threads may still hold tensors and abort the process ("terminate called without an active
    # exception", pytorch#190489): as Accelerate's examples do, the script destroys it.
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
