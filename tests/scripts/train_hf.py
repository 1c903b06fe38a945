"""Hugging Face style: transformers.Trainer on a tiny ViT built from a config (no
download), over an ImageFolder with torchvision transforms."""
import argparse

import torchvision.datasets as datasets
import torchvision.transforms as T
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments, ViTConfig, ViTForImageClassification


class Images(Dataset):
    def __init__(self, root):
        self.dataset = datasets.ImageFolder(root, T.Compose([
            T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()]))

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        x, y = self.dataset[i]
        return {"pixel_values": x, "labels": y}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("data_dir")
    p.add_argument("--output-dir", default="hf-out")
    p.add_argument("-b", "--batch-size", type=int, default=8)
    p.add_argument("-j", "--workers", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=1000)
    args = p.parse_args()
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=32, num_labels=4)
    training_args = TrainingArguments(
        output_dir=args.output_dir, per_device_train_batch_size=args.batch_size,
        max_steps=args.max_steps, dataloader_num_workers=args.workers, use_cpu=True,
        report_to=[], save_strategy="no", logging_strategy="no", eval_strategy="no",
        disable_tqdm=True)
    Trainer(model=ViTForImageClassification(config), args=training_args,
            train_dataset=Images(args.data_dir)).train()


if __name__ == "__main__":
    main()
