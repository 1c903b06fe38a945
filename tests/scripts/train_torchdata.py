"""torchdata.nodes style: a Loader over a node graph (sampler -> parallel map of the
dataset's __getitem__ -> batch -> collate -> prefetch)."""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torchdata.nodes as tn
import torchvision.datasets as datasets
import torchvision.transforms as T
from torch.utils.data import DistributedSampler, RandomSampler, default_collate


def main():
    p = argparse.ArgumentParser()
    p.add_argument("data_dir")
    p.add_argument("-b", "--batch-size", type=int, default=8)
    p.add_argument("-j", "--workers", type=int, default=1)
    p.add_argument("--epochs", type=int, default=100)
    args = p.parse_args()
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    dataset = datasets.ImageFolder(args.data_dir, T.Compose([
        T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()]))
    sampler = DistributedSampler(dataset) if distributed else RandomSampler(dataset)
    node = tn.SamplerWrapper(sampler)
    node = tn.ParallelMapper(node, map_fn=dataset.__getitem__, num_workers=args.workers,
                             method="thread")
    node = tn.Batcher(node, batch_size=args.batch_size, drop_last=True)
    node = tn.Mapper(node, default_collate)
    loader = tn.Loader(tn.Prefetcher(node, prefetch_factor=2))
    model = nn.Sequential(nn.AdaptiveAvgPool2d(8), nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                          nn.Flatten(), nn.Linear(512, 4))
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _epoch in range(args.epochs):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
