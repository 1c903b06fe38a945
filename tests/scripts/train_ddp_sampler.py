"""A DistributedDataParallel-style script (pytorch/examples imagenet's sampler handling): an
ImageFolder sharded over the ranks by a shuffling `DistributedSampler`. Without `--set-epoch`
it makes the well-known mistake of never calling `train_sampler.set_epoch(epoch)`, so every
epoch reads the same permutation. A small CNN trains on the CPU."""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision.datasets as datasets
import torchvision.transforms as transforms
from torch.utils.data import DataLoader, DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("data", metavar="DIR")
parser.add_argument("-j", "--workers", default=1, type=int)
parser.add_argument("-b", "--batch-size", default=8, type=int)
parser.add_argument("--epochs", default=2, type=int)
parser.add_argument("--set-epoch", action="store_true", help="call set_epoch each epoch")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(F.relu(self.c1(x)), 1).flatten(1))


def main():
    args = parser.parse_args()
    torch.set_num_threads(1)
    dataset = datasets.ImageFolder(args.data, transforms.Compose([
        transforms.RandomResizedCrop(32), transforms.ToTensor()]))
    train_sampler = DistributedSampler(dataset, num_replicas=int(os.environ.get("WORLD_SIZE", 1)),
                                       rank=int(os.environ.get("RANK", 0)), shuffle=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=train_sampler,
                        num_workers=args.workers)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        if args.set_epoch:
            train_sampler.set_epoch(epoch)
        for images, target in loader:
            loss = F.cross_entropy(model(images), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
