"""A plain torchvision training loop that stops making progress: after --hang-after
iterations it sleeps for good inside the loop (as a job stuck on a lock, a dead peer or a
read that never returns would), or before its first batch with --hang-after 0."""
import argparse
import time

import torch
import torch.nn as nn
from torchvision import datasets, transforms

parser = argparse.ArgumentParser()
parser.add_argument("data_dir")
parser.add_argument("-b", "--batch-size", type=int, default=4)
parser.add_argument("--hang-after", type=int, default=3)


def main():
    args = parser.parse_args()
    if args.hang_after == 0:
        time.sleep(10 ** 6)
    tf = transforms.Compose([transforms.Resize(32), transforms.CenterCrop(32),
                             transforms.ToTensor()])
    data = datasets.ImageFolder(args.data_dir, tf)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True,
                                         num_workers=1)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _epoch in range(100):
        for i, (x, y) in enumerate(loader):
            if i == args.hang_after:
                time.sleep(10 ** 6)
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()


if __name__ == "__main__":
    main()
