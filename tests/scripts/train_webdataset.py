"""webdataset style: WebDataset over local .tar shards (split by node and worker),
shuffle, decode, torchvision transforms, batched in the workers; WebLoader."""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torchvision.transforms as T
import webdataset as wds


def main():
    p = argparse.ArgumentParser()
    p.add_argument("shards", help="brace pattern, e.g. DIR/shard-{000000..000007}.tar")
    p.add_argument("-b", "--batch-size", type=int, default=8)
    p.add_argument("-j", "--workers", type=int, default=1)
    p.add_argument("--epochs", type=int, default=100)
    args = p.parse_args()
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    preprocess = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()])
    dataset = (wds.WebDataset(args.shards, shardshuffle=100, nodesplitter=wds.split_by_node)
               .shuffle(32).decode("pil").to_tuple("jpg", "cls")
               .map_tuple(preprocess, int).batched(args.batch_size))
    loader = wds.WebLoader(dataset, batch_size=None, num_workers=args.workers)
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
