"""Built-in reference job: image classification on an ImageFolder.

The equivalent of DS-Analyzer's ImageNet script: torchvision `ImageFolder`
with the standard training transforms (RandomResizedCrop 224, horizontal
flip, to tensor, normalize), a torchvision model, DistributedDataParallel and
a DistributedSampler when launched with several ranks (NCCL on cuda, gloo
otherwise).

It is a plain training script, instrumented as a user would instrument
theirs: its training loader goes through `dsanalyze.instrument(loader)`, and
the harness runs it under the bootstrap, as it runs any script:

    python -m torch.distributed.run --nproc_per_node 2 \\
        -m dsanalyze.instrument.bootstrap -m dsanalyze.jobs.image_classification --data DIR ...

So the mode (synthetic replay, cached, disk, loader alone), the warm-up, the
measured window, per-iteration and per-transform timing and the rank's
record all come from `dsanalyze.instrument.api`, from the `DSANALYZE_*`
variables the harness sets; the script only trains until it is stopped.

Devices: `cuda` (the real thing), `cpu` (the model runs on the CPU and
competes with the loader), `sim` (each step sleeps `--sim-step-ms` while the
CPU is free; with several ranks a one-element all-reduce per step keeps them
in lock-step as DDP's gradient all-reduce would).
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from PIL import Image
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

import dsanalyze
from dsanalyze.errors import CorruptSampleError, DatasetError
from dsanalyze.instrument import rank as rankenv
from dsanalyze.jobs.vision_import import import_torchvision

torchvision = import_torchvision()  # without torch._dynamo, which the sim device never needs
transforms = torchvision.transforms

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def load_rgb(path: str) -> Image.Image:
    """ImageFolder loader that names the file when it cannot be decoded."""
    try:
        with open(path, "rb") as f:
            return Image.open(f).convert("RGB")
    except (OSError, SyntaxError, ValueError) as e:
        raise CorruptSampleError(f"cannot decode image {path}: {e}; remove or replace it") from None


def train_transform() -> transforms.Compose:
    return transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="ImageFolder root")
    p.add_argument("-a", "--arch", default="resnet18", help="torchvision model name")
    p.add_argument("-b", "--batch-size", type=int, default=32, help="batch size per rank")
    p.add_argument("-j", "--workers", type=int, default=2,
                   help="DataLoader workers, or DALI threads (at most the CPU budget), per rank")
    p.add_argument("--epochs", type=int, default=None,
                   help="training epochs (default: until the harness stops the job)")
    p.add_argument("--device", choices=("cuda", "cpu", "sim"), default="sim")
    p.add_argument("--sim-step-ms", type=float, default=50.0)
    p.add_argument("--amp", action="store_true", help="mixed precision (cuda only)")
    p.add_argument("--loader", choices=("pytorch", "dali"), default="pytorch")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def build_loader(args: argparse.Namespace, world: int, rank: int, device: torch.device) -> Any:
    """The rank's loader: a DataLoader, or for `--loader dali` a DALI iterator."""
    if args.loader == "dali":
        from dsanalyze.jobs import dali_pipeline  # optional dependency: imported only when asked
        return dali_pipeline.build_iterator(
            args.data, dali_pipeline.settings_from_args(args, world, rank, device))
    dataset = torchvision.datasets.ImageFolder(args.data, transform=train_transform(), loader=load_rgb)
    if world > 1:
        sampler: Any = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True,
                                          seed=args.seed, drop_last=True)
    else:
        sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(args.seed))
    if len(dataset) // world < args.batch_size:
        raise DatasetError(f"{args.data} has {len(dataset)} images: fewer than one batch of "
                           f"{args.batch_size} per rank; lower -b or add images")
    return DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                      num_workers=args.workers, pin_memory=device.type == "cuda", drop_last=True,
                      persistent_workers=args.workers > 0)


def batch_unpacker(loader: str) -> Callable[[Any], tuple[Any, Any]]:
    """(images, targets) out of a batch: a DataLoader's pair, a DALI iterator's list of dicts."""
    if loader == "dali":
        from dsanalyze.jobs import dali_pipeline
        return dali_pipeline.images_labels
    return tuple


def sim_step(step_ms: float, world: int) -> Callable[[Any], None]:
    """A step of `step_ms` with the CPU free, all-reduce included (`--device sim`)."""
    step_s = step_ms / 1000.0
    token = torch.zeros(1)

    def step(batch: Any) -> None:
        # The step takes step_s in all, communication included, as DDP's
        # all-reduce overlaps the backward pass; the CPU is free meanwhile.
        deadline = time.perf_counter() + step_s
        if world > 1:
            dist.all_reduce(token)  # gradient all-reduce: ranks advance together
        remaining = deadline - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
    return step


def make_step(args: argparse.Namespace, device: torch.device, world: int) -> Callable[[Any], None]:
    """The training step for the device; it takes a batch (images, targets)."""
    if args.device == "sim":
        return sim_step(args.sim_step_ms, world)
    model = torchvision.models.get_model(args.arch, num_classes=1000).to(device)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    model.train()
    criterion = torch.nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    use_amp = args.amp and device.type == "cuda"
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    unpack = batch_unpacker(args.loader)

    def train_step(batch: Any) -> None:
        images, target = unpack(batch)
        # In synthetic mode these copies are made once: the replayed batch stays on the device.
        images = images.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)
        with torch.autocast(device.type, enabled=use_amp):
            loss = criterion(model(images), target)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    return train_step


def setup_device(args: argparse.Namespace, world: int) -> torch.device:
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise DatasetError("--device cuda but torch sees no GPU: use --device sim or cpu")
        device = torch.device("cuda", rankenv.local_rank())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    return device


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    world, rank = rankenv.world_size(), rankenv.rank()
    threads = os.environ.get(rankenv.ENV_THREADS)  # the rank's CPU budget, from the harness
    if threads:
        torch.set_num_threads(int(threads))
    device = setup_device(args, world)
    loader = dsanalyze.instrument(build_loader(args, world, rank, device))
    step = make_step(args, device, world)
    for epoch in range(args.epochs) if args.epochs is not None else itertools.count():
        set_epoch = getattr(getattr(loader, "sampler", None), "set_epoch", None)
        if set_epoch is not None:
            set_epoch(epoch)
        for batch in loader:
            step(batch)


if __name__ == "__main__":
    main()
