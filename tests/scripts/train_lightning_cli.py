"""Lightning's ImageNet-template entry point: LightningCLI over a LightningModule and a
LightningDataModule (`fit --data.data_dir DIR --trainer.max_steps N ...`)."""
from lightning.pytorch.cli import LightningCLI
from train_lightning import Classifier, ImageData

if __name__ == "__main__":
    # Each harness mode runs the script again: let the saved config.yaml be overwritten.
    LightningCLI(Classifier, ImageData, save_config_kwargs={"overwrite": True})
