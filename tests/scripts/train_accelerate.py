"""An accelerate loop written by hand: accelerator.prepare(model, optimizer, loader)
wraps the loader in accelerate's own shard class; accelerator.backward(loss)."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision.datasets as datasets
import torchvision.transforms as T
from accelerate import Accelerator
from torch.utils.data import DataLoader


def main():
    p = argparse.ArgumentParser()
    p.add_argument("data_dir")
    p.add_argument("-b", "--batch-size", type=int, default=8)
    p.add_argument("-j", "--workers", type=int, default=0)
    p.add_argument("--epochs", type=int, default=100)
    args = p.parse_args()
    accelerator = Accelerator(cpu=True)
    dataset = datasets.ImageFolder(args.data_dir, T.Compose([
        T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()]))
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers)
    model = nn.Sequential(nn.AdaptiveAvgPool2d(8), nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                          nn.Flatten(), nn.Linear(512, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for _epoch in range(args.epochs):
        model.train()
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()


if __name__ == "__main__":
    main()
