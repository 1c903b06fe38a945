"""timm style (train.py, scaled down): create_dataset + create_loader, with or without its
PrefetchLoader (--prefetcher), a model by name with pretrained=False, DDP under torchrun."""
import argparse
import os

import timm
import torch
import torch.distributed as dist
import torch.nn as nn
from timm.data import create_dataset, create_loader, resolve_data_config

parser = argparse.ArgumentParser()
parser.add_argument("data_dir")
parser.add_argument("--model", default="test_resnet")
parser.add_argument("-b", "--batch-size", type=int, default=8)
parser.add_argument("-j", "--workers", type=int, default=1)
parser.add_argument("--epochs", type=int, default=100)
parser.add_argument("--img-size", type=int, default=32)
parser.add_argument("--prefetcher", action="store_true")


def main():
    args = parser.parse_args()
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    device = torch.device("cpu")
    model = timm.create_model(args.model, pretrained=False, num_classes=4)
    data_config = resolve_data_config({"input_size": (3, args.img_size, args.img_size)}, model=model)
    dataset_train = create_dataset("", root=args.data_dir, split="", is_training=True)
    loader_train = create_loader(
        dataset_train, input_size=data_config["input_size"], batch_size=args.batch_size,
        is_training=True, use_prefetcher=args.prefetcher, device=device,
        num_workers=args.workers, distributed=distributed, mean=data_config["mean"],
        std=data_config["std"], persistent_workers=False)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        if distributed and hasattr(loader_train.sampler, "set_epoch"):
            loader_train.sampler.set_epoch(epoch)
        model.train()
        for input, target in loader_train:
            if not args.prefetcher:
                input, target = input.to(device), target.to(device)
            loss = loss_fn(model(input), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
