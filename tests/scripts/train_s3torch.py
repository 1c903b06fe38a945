"""s3torchconnector style: S3MapDataset over every object under an s3:// prefix, each
S3Reader decoded in the DataLoader workers; the class is the key's folder."""
import argparse
import io
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torchvision.transforms as T
from PIL import Image
from s3torchconnector import S3ClientConfig, S3MapDataset
from torch.utils.data import DataLoader, DistributedSampler

CLASSES = ("class_000", "class_001", "class_002", "class_003")
preprocess = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()])


def load(reader):
    image = Image.open(io.BytesIO(reader.read())).convert("RGB")
    return preprocess(image), CLASSES.index(reader.key.split("/")[-2])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("uri", help="s3://bucket/prefix/")
    p.add_argument("--endpoint", default=os.environ.get("AWS_ENDPOINT_URL"))
    p.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"))
    p.add_argument("-b", "--batch-size", type=int, default=8)
    p.add_argument("-j", "--workers", type=int, default=1)
    p.add_argument("--epochs", type=int, default=100)
    args = p.parse_args()
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    dataset = S3MapDataset.from_prefix(args.uri, region=args.region, endpoint=args.endpoint,
                                       transform=load,
                                       s3client_config=S3ClientConfig(force_path_style=True))
    sampler = DistributedSampler(dataset) if distributed else None
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=sampler is None,
                        sampler=sampler, num_workers=args.workers)
    model = nn.Sequential(nn.AdaptiveAvgPool2d(8), nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                          nn.Flatten(), nn.Linear(512, len(CLASSES)))
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
