"""fsspec / s3fs style: a map-style Dataset of s3:// keys listed with s3fs, each sample
read with `fs.open` in the DataLoader workers (the endpoint from AWS_ENDPOINT_URL)."""
import argparse
import os

import s3fs
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torchvision.transforms as T
from PIL import Image
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class S3ImageFolder(Dataset):
    """`bucket/prefix/<class>/<image>.jpg` objects, read on demand. s3fs is not fork-safe:
    each DataLoader worker opens its own filesystem on first use."""

    def __init__(self, uri, transform):
        self.keys = sorted(s3fs.S3FileSystem().find(uri))
        self.fs = None
        self.classes = sorted({k.split("/")[-2] for k in self.keys})
        self.transform = transform

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        if self.fs is None:
            self.fs = s3fs.S3FileSystem(skip_instance_cache=True)
        with self.fs.open(self.keys[i], "rb") as f:
            image = Image.open(f).convert("RGB")
        return self.transform(image), self.classes.index(self.keys[i].split("/")[-2])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("uri", help="s3://bucket/prefix/")
    p.add_argument("-b", "--batch-size", type=int, default=8)
    p.add_argument("-j", "--workers", type=int, default=1)
    p.add_argument("--epochs", type=int, default=100)
    args = p.parse_args()
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    preprocess = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()])
    dataset = S3ImageFolder(args.uri, preprocess)
    sampler = DistributedSampler(dataset) if distributed else None
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=sampler is None,
                        sampler=sampler, num_workers=args.workers)
    model = nn.Sequential(nn.AdaptiveAvgPool2d(8), nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                          nn.Flatten(), nn.Linear(512, len(dataset.classes)))
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
