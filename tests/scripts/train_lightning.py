"""Lightning style: a LightningModule with train_dataloader/val_dataloader, or a
LightningDataModule (--datamodule), Trainer.fit; DDP under torchrun (Lightning detects
torchelastic). --val-log: each validation pass appends `rank sanity_checking batches`."""
import argparse
import os

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision.datasets as datasets
import torchvision.transforms as T
from torch.utils.data import DataLoader

VAL_BATCH = 5  # not the training batch size: a measured validation batch would show


def transform(train):
    steps = [T.RandomResizedCrop(32), T.RandomHorizontalFlip()] if train else [
        T.Resize(36), T.CenterCrop(32)]
    return T.Compose([*steps, T.ToTensor(), T.Normalize([0.5] * 3, [0.25] * 3)])


class ImageData(L.LightningDataModule):
    def __init__(self, data_dir: str, batch_size: int = 8, workers: int = 0):
        super().__init__()
        self.data_dir, self.batch_size, self.workers = data_dir, batch_size, workers

    def setup(self, stage=None):
        self.train = datasets.ImageFolder(self.data_dir, transform(True))
        self.val = datasets.ImageFolder(self.data_dir, transform(False))

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True,
                          num_workers=self.workers)

    def val_dataloader(self):
        return DataLoader(self.val, batch_size=VAL_BATCH, num_workers=self.workers)


class Classifier(L.LightningModule):
    def __init__(self, val_log: str = "", lr: float = 0.05):
        super().__init__()
        self.val_log, self.lr, self.val_batches = val_log, lr, 0
        self.net = nn.Sequential(nn.AdaptiveAvgPool2d(8), nn.Conv2d(3, 8, 3, padding=1),
                                 nn.ReLU(), nn.Flatten(), nn.Linear(512, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        self.val_batches += 1

    def on_validation_epoch_end(self):
        if self.val_log:
            with open(self.val_log, "a") as f:
                f.write(f"{self.global_rank} {int(self.trainer.sanity_checking)} "
                        f"{self.val_batches}\n")
        self.val_batches = 0

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class ClassifierWithData(Classifier):
    """The loaders defined on the LightningModule itself."""

    def __init__(self, data: ImageData, val_log: str = ""):
        super().__init__(val_log)
        self.data = data

    def train_dataloader(self):
        self.data.setup()
        return self.data.train_dataloader()

    def val_dataloader(self):
        self.data.setup()
        return self.data.val_dataloader()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("data_dir")
    p.add_argument("-b", "--batch-size", type=int, default=8)
    p.add_argument("-j", "--workers", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=-1)
    p.add_argument("--max-epochs", type=int, default=100)
    p.add_argument("--datamodule", action="store_true")
    p.add_argument("--val-log", default="")
    args = p.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    data = ImageData(args.data_dir, args.batch_size, args.workers)
    trainer = L.Trainer(accelerator="cpu", devices=world, strategy="ddp" if world > 1 else "auto",
                        max_steps=args.max_steps, max_epochs=args.max_epochs, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=2)
    if args.datamodule:
        trainer.fit(Classifier(args.val_log), datamodule=data)
    else:
        trainer.fit(ClassifierWithData(data, args.val_log))


if __name__ == "__main__":
    main()
