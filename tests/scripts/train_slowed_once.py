"""A plain PyTorch loop whose transforms one run does more work in: as a neighbour on a VM's
host makes the same work cost more CPU during one run. The first run to find --slow-marker
removes it and spins --spin-ms of its thread's CPU in every transform call; every later run
does the transforms alone. Or, with --spin-log, the N-th run (the lines the log has) spins the
N-th of --spin-schedule's milliseconds (0 past its end) and adds its line. ImageFolder with a
real DataLoader; the step sleeps --step-ms."""
import argparse
import os
import time

import torch
import torch.nn as nn
from torchvision import datasets, transforms

parser = argparse.ArgumentParser()
parser.add_argument("data")
parser.add_argument("-b", "--batch-size", type=int, default=8)
parser.add_argument("-j", "--workers", type=int, default=1)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--step-ms", type=float, default=5.0)
parser.add_argument("--slow-marker")
parser.add_argument("--spin-ms", type=float, default=4.0)
parser.add_argument("--spin-log")
parser.add_argument("--spin-schedule", type=lambda t: [float(x) for x in t.split(",")],
                    default=[])


class Spin:
    """Burn `ms` of the calling thread's CPU, then pass the image on."""

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def __call__(self, img):
        end = time.thread_time() + self.ms / 1000.0
        while time.thread_time() < end:
            pass
        return img


def main():
    args = parser.parse_args()
    spin_ms = 0.0
    if args.slow_marker and os.path.exists(args.slow_marker):
        os.remove(args.slow_marker)
        spin_ms = args.spin_ms
    if args.spin_log:
        with open(args.spin_log, "a+") as log:
            log.seek(0)
            n = len(log.readlines())
            spin_ms = args.spin_schedule[n] if n < len(args.spin_schedule) else 0.0
            log.write(f"{spin_ms}\n")
    steps = [transforms.RandomResizedCrop(32), transforms.ToTensor()]
    tf = transforms.Compose(steps + ([Spin(spin_ms)] if spin_ms else []))
    dataset = datasets.ImageFolder(args.data, tf)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.workers, drop_last=True)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, len(dataset.classes)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.epochs):
        for images, target in loader:
            loss = nn.functional.cross_entropy(model(images), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            time.sleep(args.step_ms / 1000.0)


if __name__ == "__main__":
    main()
