"""DALI loader of the built-in job (`--loader dali`): the pipeline and its iterator.

The same training input as the DataLoader path of `image_classification`,
done by NVIDIA DALI:

    fn.readers.file        the ImageFolder, labels from the sorted class folders;
                           one shard per rank, the whole dataset reshuffled
                           every epoch (a global permutation, as
                           DistributedSampler), the last partial batch padded
                           and dropped (as drop_last=True)
    fn.decoders.image_random_crop   decode + RandomResizedCrop's random window
                           (area 8-100 %, aspect 3/4-4/3); device `mixed`
                           (nvJPEG, output on the GPU) on cuda, `cpu` otherwise
    fn.resize              the window to 224 x 224
    fn.crop_mirror_normalize  random horizontal mirror (p = 0.5), ImageNet
                           mean/std, float32 CHW

and a `DALIGenericIterator` over outputs `images` and `labels`, which yields
one list of one dict per batch. `len()` is the batches per rank per epoch,
(files // ranks) // batch size, the DataLoader's figure.

Threads: DALI follows the cpuset but sizes its thread pool from
`num_threads` alone, so `num_threads` = `-j` (at least 1) capped by the
rank's CPU budget (`DSANALYZE_THREADS`, set by the harness). The settings,
prefetch depths included, are recorded in the rank's record (`settings`,
which `instrument.api.loader_settings` reads).

Epochs: the iterator ends an epoch with StopIteration and is reset by the
next `iter()` on it (DALI's `__iter__`), so `dsanalyze.instrument` times
every `next()` as wait, including the reset, like any loader's.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch

from dsanalyze.errors import ConfigError, CorruptSampleError, DatasetError
from dsanalyze.instrument import rank as rankenv

try:
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
except ImportError as e:  # DALI is an optional dependency on some platforms
    raise ConfigError(f"--loader dali needs NVIDIA DALI ({e}): pip install nvidia-dali-cuda120, "
                      "or use --loader pytorch") from None

READER_NAME = "Reader"
OUTPUT_MAP = ("images", "labels")
CROP_PX = 224
MEAN_255 = (0.485 * 255, 0.456 * 255, 0.406 * 255)  # the DataLoader's MEAN, STD on 0-255 pixels
STD_255 = (0.229 * 255, 0.224 * 255, 0.225 * 255)
PIPELINE_PREFETCH_DEPTH = 2  # batches the pipeline runs ahead of the training loop (DALI default)
READER_PREFETCH_DEPTH = 1  # batches of file contents the reader reads ahead (DALI default)


@dataclass(frozen=True)
class DaliSettings:
    """How one rank's DALI loader is built; recorded as the rank's `extra["loader"]`.

    `num_threads`: DALI CPU threads = max(1, `threads_requested`) capped by
    `thread_budget` (the rank's CPU budget; None: not given). `device_id`
    None: a CPU-only pipeline (no CUDA touched); else the GPU of the rank.
    """

    batch_size: int
    num_threads: int
    threads_requested: int
    thread_budget: int | None
    device_id: int | None
    decoder_device: str
    shard_id: int
    num_shards: int
    seed: int
    prefetch_queue_depth: int = PIPELINE_PREFETCH_DEPTH
    reader_prefetch_queue_depth: int = READER_PREFETCH_DEPTH
    shuffle_after_epoch: bool = True  # the reader's file order: a fresh permutation each epoch

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "dali", **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DaliSettings:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def thread_count(requested: int, budget: int | None) -> int:
    """DALI `num_threads`: `-j` (0 means 1: DALI needs a thread), at most the CPU budget."""
    n = max(1, requested)
    return n if budget is None else max(1, min(n, budget))


def env_thread_budget() -> int | None:
    """The rank's CPU budget from the harness (`DSANALYZE_THREADS`), None when run alone."""
    text = os.environ.get(rankenv.ENV_THREADS, "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def settings_from_args(args: argparse.Namespace, world: int, rank: int,
                       device: torch.device) -> DaliSettings:
    """The built-in job's DALI settings: shard = rank, GPU = the rank's device on cuda."""
    budget = env_thread_budget()
    on_gpu = device.type == "cuda"
    return DaliSettings(
        batch_size=args.batch_size, num_threads=thread_count(args.workers, budget),
        threads_requested=args.workers, thread_budget=budget,
        device_id=device.index if on_gpu else None, decoder_device="mixed" if on_gpu else "cpu",
        shard_id=rank, num_shards=world, seed=args.seed)


def file_reader(root: str, s: DaliSettings) -> tuple[Any, Any]:
    """(encoded files, labels) of this rank's shard; call inside a pipeline definition.

    `shuffle_after_epoch` permutes the whole file list every epoch with the
    same seed on every rank, so the shards stay disjoint (DALI's
    `random_shuffle` only shuffles within a 1024-sample read-ahead buffer).
    `pad_last_batch` keeps a shard's last batch from reading into the next
    epoch; the iterator drops that padded batch.
    """
    return fn.readers.file(
        file_root=root, name=READER_NAME, shard_id=s.shard_id, num_shards=s.num_shards,
        shuffle_after_epoch=s.shuffle_after_epoch, shuffle_after_epoch_seed=s.seed,
        pad_last_batch=True,
        prefetch_queue_depth=s.reader_prefetch_queue_depth)


@pipeline_def
def training_pipeline(root: str, s: DaliSettings) -> tuple[Any, Any]:
    """The DALI graph of the built-in job; outputs (images, labels) as in OUTPUT_MAP."""
    jpegs, labels = file_reader(root, s)
    images = fn.decoders.image_random_crop(jpegs, device=s.decoder_device,
                                           output_type=types.RGB)
    images = fn.resize(images, resize_x=CROP_PX, resize_y=CROP_PX)
    images = fn.crop_mirror_normalize(
        images, dtype=types.FLOAT, output_layout="CHW", mean=list(MEAN_255), std=list(STD_255),
        mirror=fn.random.coin_flip(probability=0.5))
    if s.device_id is not None:
        labels = labels.gpu()  # the whole batch on the device, as the synthetic replay wants it
    return images, labels


class DaliLoader(DALIGenericIterator):
    """A `DALIGenericIterator` that keeps its settings and names decoding failures."""

    def __init__(self, pipe: Any, settings: DaliSettings, root: str) -> None:
        self.settings = settings
        self.root = root
        try:  # the constructor already runs the first batch
            # DROP with a padded reader: exactly (files // shards) // batch_size batches per epoch.
            super().__init__([pipe], list(OUTPUT_MAP), reader_name=READER_NAME,
                             last_batch_policy=LastBatchPolicy.DROP, auto_reset=False)
        except RuntimeError as e:
            if not is_decode_error(e):
                raise
            raise self._corrupt(e) from None

    def __next__(self) -> list[dict[str, torch.Tensor]]:
        try:
            return super().__next__()
        except RuntimeError as e:
            if not is_decode_error(e):
                raise
            raise self._corrupt(e) from None

    def _corrupt(self, e: RuntimeError) -> CorruptSampleError:
        return CorruptSampleError(
            f"DALI cannot decode an image under {self.root} ({_cause(str(e))}); DALI does not "
            "name the file: run with --loader pytorch to find it")


def is_decode_error(e: RuntimeError) -> bool:
    """A DALI pipeline error from the decoder about the data (not about memory or the GPU)."""
    cause = _cause(str(e)).lower()
    return "fn.decoders" in str(e) and not any(w in cause for w in ("memory", "cuda", "device"))


def _cause(message: str) -> str:
    """The line of a DALI pipeline error that says what went wrong."""
    lines = [ln.strip() for ln in message.split("encountered:", 1)[-1].splitlines()]
    return next((ln for ln in lines if ln), "decoder error")


def build_pipeline(root: str, s: DaliSettings) -> Any:
    """Build the pipeline; refuse a shard with less than one batch."""
    pipe = training_pipeline(
        root, s, batch_size=s.batch_size, num_threads=s.num_threads, device_id=s.device_id,
        seed=s.seed + s.shard_id, prefetch_queue_depth=s.prefetch_queue_depth)
    pipe.build()
    files = pipe.epoch_size(READER_NAME)
    if files // s.num_shards < s.batch_size:
        raise DatasetError(f"{root} has {files} images: fewer than one batch of {s.batch_size} "
                           f"per rank ({s.num_shards} ranks); lower -b or add images")
    return pipe


def build_iterator(root: str, s: DaliSettings) -> DaliLoader:
    """The rank's DALI iterator; its first batch is already being prepared."""
    return DaliLoader(build_pipeline(root, s), s, root)


def images_labels(batch: list[dict[str, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(images NCHW float32, labels int64 of shape N) out of one DALIGenericIterator batch."""
    out = batch[0]  # one pipeline per rank: a list of one dict
    return out[OUTPUT_MAP[0]], out[OUTPUT_MAP[1]].reshape(-1).long()
