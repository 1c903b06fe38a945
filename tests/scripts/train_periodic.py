"""A plain PyTorch loop with a periodic stall: every --every batches it saves a checkpoint
(torch.save of the model) and waits --stall-ms more, as a job that checkpoints or logs every
K steps. ImageFolder with a real DataLoader (workers decode the JPEGs); the step sleeps
--step-ms (a GPU step's time, on no GPU), and --drift-ms more per 100 steps taken (a step that
slows as the job runs: a growing in-memory log, a device warming up); DDP over gloo under
torchrun."""
import argparse
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torchvision import datasets, transforms

parser = argparse.ArgumentParser()
parser.add_argument("data")
parser.add_argument("-b", "--batch-size", type=int, default=8)
parser.add_argument("-j", "--workers", type=int, default=1)
parser.add_argument("--epochs", type=int, default=100)
parser.add_argument("--step-ms", type=float, default=20.0)
parser.add_argument("--every", type=int, default=7, help="checkpoint every this many batches")
parser.add_argument("--stall-ms", type=float, default=60.0, help="and wait this long then")
parser.add_argument("--drift-ms", type=float, default=0.0, help="the step's growth per 100 steps")


def main():
    args = parser.parse_args()
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    tf = transforms.Compose([transforms.RandomResizedCrop(32), transforms.ToTensor()])
    dataset = datasets.ImageFolder(args.data, tf)
    sampler = torch.utils.data.distributed.DistributedSampler(dataset) if distributed else None
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size,
                                         shuffle=sampler is None, sampler=sampler,
                                         num_workers=args.workers, drop_last=True)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, len(dataset.classes)))
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    checkpoint = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
    step = 0
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for images, target in loader:
            loss = nn.functional.cross_entropy(model(images), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            time.sleep((args.step_ms + args.drift_ms * step / 100) / 1000.0)
            step += 1
            if step % args.every == 0:
                torch.save(model.state_dict(), checkpoint)
                time.sleep(args.stall_ms / 1000.0)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
