"""A DALI training script in the style of NVIDIA's PyTorch ImageNet example (main.py).

`@pipeline_def` with `fn.readers.file` over an ImageFolder, `image_random_crop` on
the CPU (`--dali_cpu`: no GPU), resize, `crop_mirror_normalize`, and a
`DALIClassificationIterator` with `reader_name`, `auto_reset` and a PARTIAL
last batch; `-j` is DALI's `num_threads`. A small CNN trains on the CPU.
"""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from nvidia.dali import fn, pipeline_def, types
from nvidia.dali.plugin.pytorch import DALIClassificationIterator, LastBatchPolicy


@pipeline_def
def create_dali_pipeline(data_dir, crop, size, shard_id, num_shards, dali_cpu=False,
                         is_training=True):
    images, labels = fn.readers.file(file_root=data_dir, shard_id=shard_id,
                                     num_shards=num_shards, random_shuffle=is_training,
                                     pad_last_batch=True, name="Reader")
    dali_device = "cpu" if dali_cpu else "gpu"
    decoder_device = "cpu" if dali_cpu else "mixed"
    if is_training:
        images = fn.decoders.image_random_crop(images, device=decoder_device,
                                               output_type=types.RGB,
                                               random_aspect_ratio=[0.8, 1.25],
                                               random_area=[0.1, 1.0], num_attempts=100)
        images = fn.resize(images, device=dali_device, resize_x=crop, resize_y=crop,
                           interp_type=types.INTERP_TRIANGULAR)
        mirror = fn.random.coin_flip(probability=0.5)
    else:
        images = fn.decoders.image(images, device=decoder_device, output_type=types.RGB)
        images = fn.resize(images, device=dali_device, size=size, mode="not_smaller",
                           interp_type=types.INTERP_TRIANGULAR)
        mirror = False
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                      crop=(crop, crop),
                                      mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                      std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
                                      mirror=mirror)
    if not dali_cpu:
        labels = labels.gpu()
    return images, labels


class Net(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        x = F.relu(self.c2(F.relu(self.c1(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def main():
    p = argparse.ArgumentParser(description="PyTorch ImageNet Training with DALI")
    p.add_argument("data", metavar="DIR")
    p.add_argument("-j", "--workers", default=2, type=int, help="DALI threads")
    p.add_argument("-b", "--batch-size", default=32, type=int)
    p.add_argument("--epochs", default=2, type=int)
    p.add_argument("--crop-size", default=96, type=int)
    p.add_argument("--dali_cpu", action="store_true")
    p.add_argument("-p", "--print-freq", default=100, type=int)
    args = p.parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    cuda = torch.cuda.is_available() and not args.dali_cpu
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    torch.set_num_threads(1)
    traindir = os.path.join(args.data, "train") if os.path.isdir(
        os.path.join(args.data, "train")) else args.data
    pipe = create_dali_pipeline(batch_size=args.batch_size, num_threads=args.workers,
                                device_id=local_rank if cuda else None, seed=12 + local_rank,
                                data_dir=traindir, crop=args.crop_size, size=args.crop_size,
                                dali_cpu=not cuda, shard_id=local_rank, num_shards=world,
                                is_training=True)
    pipe.build()
    train_loader = DALIClassificationIterator(pipe, reader_name="Reader",
                                              last_batch_policy=LastBatchPolicy.PARTIAL,
                                              auto_reset=True)
    classes = len([d for d in os.listdir(traindir) if os.path.isdir(os.path.join(traindir, d))])
    model = Net(classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(args.epochs):
        model.train()
        for i, data in enumerate(train_loader):
            images = data[0]["data"].to(device)
            target = data[0]["label"].squeeze(-1).long().to(device)
            loss = F.cross_entropy(model(images), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if i % args.print_freq == 0:
                print(f"epoch {epoch} [{i}/{len(train_loader)}] loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
