"""Hugging Face `datasets` style: an Arrow dataset saved with `save_to_disk` (several shards of
many samples each, read through a memory map: page faults, not read()), JPEG bytes decoded
in the loader's workers by a `set_transform`, a plain loop over a torch DataLoader."""
import argparse
import io

import datasets
import torch
import torch.nn as nn
from PIL import Image
from torchvision import transforms

parser = argparse.ArgumentParser()
parser.add_argument("data_dir")
parser.add_argument("-b", "--batch-size", type=int, default=8)
parser.add_argument("-j", "--workers", type=int, default=1)
parser.add_argument("--epochs", type=int, default=100)

TF = transforms.Compose([transforms.Resize(32), transforms.CenterCrop(32), transforms.ToTensor()])


def decode(batch):
    return {"pixels": [TF(Image.open(io.BytesIO(b)).convert("RGB")) for b in batch["jpeg"]],
            "label": batch["label"]}


def main():
    args = parser.parse_args()
    data = datasets.load_from_disk(args.data_dir)
    data.set_transform(decode)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.workers)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _epoch in range(args.epochs):
        for batch in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(batch["pixels"]), batch["label"]).backward()
            opt.step()


if __name__ == "__main__":
    main()
