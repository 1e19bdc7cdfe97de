"""A Lightning job with two DDP ranks on the CPU: `Trainer(strategy="ddp", devices=2,
accelerator="cpu")`. Lightning starts its ranks itself (it re-runs this script as a second
process with LOCAL_RANK set); each rank's loader has one worker (tests/test_ranks.py)."""

import argparse

import lightning as L
import torch
from _common import Numbers
from torch.utils.data import DataLoader


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch / 1e6).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(Numbers(), batch_size=16, num_workers=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    torch.set_num_threads(1)
    trainer = L.Trainer(
        strategy="ddp",
        devices=2,
        accelerator="cpu",
        max_steps=args.steps,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        logger=False,
    )
    trainer.fit(Model())


if __name__ == "__main__":
    main()
