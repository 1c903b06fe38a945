"""A Kaggle-style training script: a CSV manifest, a hand-written Dataset, numpy augmentation."""
import argparse
import csv
import os
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader, Dataset


class CsvImages(Dataset):
    def __init__(self, manifest, root, size=64, train=True):
        with open(manifest) as f:
            rows = list(csv.DictReader(f))
        self.items = [(os.path.join(root, r["path"]), int(r["label"])) for r in rows]
        self.size = size
        self.train = train

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, label = self.items[i]
        img = Image.open(path).convert("RGB")
        w, h = img.size
        s = min(w, h)
        x0, y0 = random.randint(0, w - s), random.randint(0, h - s)
        img = img.crop((x0, y0, x0 + s, y0 + s)).resize((self.size, self.size), Image.BILINEAR)
        a = np.asarray(img, dtype=np.float32) / 255.0
        if self.train and random.random() < 0.5:
            a = a[:, ::-1]
        a = (a - 0.45) / 0.25
        return torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1))), label


class Net(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, padding=1)
        self.c2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc = nn.Linear(64 * 16 * 16, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.fc(x.flatten(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--csv", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--bs", type=int, default=24)
    p.add_argument("--epochs", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(1)
    ds = CsvImages(args.csv, args.root)
    classes = 1 + max(label for _, label in ds.items)
    dl = DataLoader(ds, batch_size=args.bs, shuffle=True, num_workers=args.num_workers,
                    persistent_workers=args.num_workers > 0, drop_last=True)
    model = Net(classes)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        model.train()
        total = 0.0
        for x, y in dl:
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"epoch {epoch}: loss {total / len(dl):.3f}", flush=True)


if __name__ == "__main__":
    main()
