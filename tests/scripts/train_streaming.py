"""mosaicml-streaming style: a StreamingDataset of MDS shards (`MDSWriter`'s `index.json` and
`shard.*.mds`, columns `image` (JPEG bytes) and `label`) read from an s3:// remote into a
local cache directory, decoded and transformed in the DataLoader workers. Streaming splits
the samples over ranks and workers itself (RANK, WORLD_SIZE); boto3 finds a non-AWS
endpoint in AWS_ENDPOINT_URL (or S3_ENDPOINT_URL)."""
import argparse
import io
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torchvision.transforms as T
from PIL import Image
from streaming import StreamingDataset
from torch.utils.data import DataLoader


class ImageDataset(StreamingDataset):
    preprocess = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()])

    def __getitem__(self, idx):
        sample = super().__getitem__(idx)
        image = Image.open(io.BytesIO(sample["image"])).convert("RGB")
        return self.preprocess(image), sample["label"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--remote", required=True, help="s3://bucket/prefix of the MDS shards")
    p.add_argument("--local", required=True, help="local cache directory")
    p.add_argument("-b", "--batch-size", type=int, default=8)
    p.add_argument("-j", "--workers", type=int, default=1)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--shuffle-block-size", type=int, default=None,
                   help="samples shuffled together (streaming's default: millions)")
    args = p.parse_args()
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    dataset = ImageDataset(remote=args.remote, local=args.local, shuffle=True,
                           shuffle_block_size=args.shuffle_block_size,
                           batch_size=args.batch_size)
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers)
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
