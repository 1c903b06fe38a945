"""A plain PyTorch script with native code of its own on the dataset's disk: a blob
standing in for an extension module's .so, mapped and paged in at start-up as the dynamic
loader does, and kept mapped. With --evict-at-exit it drops the blob's pages when it ends,
as memory pressure between two runs would."""
import argparse
import mmap
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision.datasets as datasets
import torchvision.transforms as T
from torch.utils.data import DataLoader


def load_library(path):
    """Map the file and touch every page (what importing an extension module does)."""
    f = open(path, "rb")
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    total = sum(m[off] for off in range(0, len(m), mmap.PAGESIZE))
    return f, m, total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("data_dir")
    p.add_argument("--lib", required=True)
    p.add_argument("-b", "--batch-size", type=int, default=8)
    p.add_argument("-j", "--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--evict-at-exit", action="store_true")
    args = p.parse_args()
    lib, mapped, _ = load_library(args.lib)
    dataset = datasets.ImageFolder(args.data_dir, T.Compose([T.Resize(32), T.CenterCrop(32),
                                                             T.ToTensor()]))
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                          nn.Flatten(), nn.Linear(128, len(dataset.classes)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    try:
        for _epoch in range(args.epochs):
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    finally:
        mapped.close()
        if args.evict_at_exit:
            os.posix_fadvise(lib.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        lib.close()


if __name__ == "__main__":
    main()
