"""A torchvision DatasetFolder over raw binary samples (`.bin`, one per sample, class folders),
decoded by a CPU-bound loader (a checksum pass and a reshape), a plain loop: prep cost scales
with the sample's bytes, and the dataset can be made larger than memory in seconds."""
import argparse

import numpy as np
import torch
import torch.nn as nn
from torchvision.datasets import DatasetFolder

parser = argparse.ArgumentParser()
parser.add_argument("data_dir")
parser.add_argument("-b", "--batch-size", type=int, default=4)
parser.add_argument("-j", "--workers", type=int, default=1)
parser.add_argument("--passes", type=int, default=4, help="decode passes over each sample")


def main():
    args = parser.parse_args()

    def load(path):
        raw = np.fromfile(path, dtype=np.uint8)
        x = raw.astype(np.float32)
        for _ in range(args.passes):  # the decode's CPU work, per byte
            x = np.sqrt(x * 1.0001 + 1.0)
        return torch.from_numpy(x[:3072].reshape(3, 32, 32).copy())

    data = DatasetFolder(args.data_dir, loader=load, extensions=(".bin",))
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.workers)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, len(data.classes)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _epoch in range(100):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()


if __name__ == "__main__":
    main()
