"""A plain PyTorch training script, as a team writes one: it writes its dataset to files first (shards of
images and labels), reads them back through a ``DataLoader`` with worker processes and pinned memory, trains a
small convolutional network with ``DistributedDataParallel`` when it is started as several processes (torchrun,
or stepwatch's ``--nproc``), and clips its gradients. Three lines make it a stepwatch benchmark (``import
stepwatch`` and the ``stepwatch.steps`` around the loader); run on its own, it trains as before:

    python examples/torch_ddp_train.py --epochs 1                                  # on its own
    torchrun --nproc-per-node 2 examples/torch_ddp_train.py --epochs 1              # on its own, data-parallel
    stepwatch run --script examples/torch_ddp_train.py --keras-backend torch --nproc 2 -- --batch 16

On a GPU host each rank trains on its own GPU with NCCL (``--device gpu``); on a CPU, gloo.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

import stepwatch

SHARD_EXAMPLES = 256
IMAGE = (3, 32, 32)
CLASSES = 10


def write_dataset(folder: Path, shards: int, seed: int) -> list[Path]:
    """Shards of random images (uint8, as decoded images are) and their labels, one .npz file each."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for index in range(shards):
        path = folder / f"shard-{index:03d}.npz"
        if not path.exists():
            images = rng.integers(0, 256, size=(SHARD_EXAMPLES, *IMAGE), dtype=np.uint8)
            labels = rng.integers(0, CLASSES, size=SHARD_EXAMPLES, dtype=np.int64)
            np.savez(path.with_suffix(".tmp.npz"), images=images, labels=labels)
            os.replace(path.with_suffix(".tmp.npz"), path)
        paths.append(path)
    return paths


class ShardDataset(Dataset):
    """Examples read from the shards' files on demand (each worker opens them itself), normalised and flipped."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self.cache: dict[int, dict[str, np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self.paths) * SHARD_EXAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        shard, offset = divmod(index, SHARD_EXAMPLES)
        if shard not in self.cache:
            with np.load(self.paths[shard]) as data:
                self.cache[shard] = {"images": data["images"], "labels": data["labels"]}
        image = torch.from_numpy(self.cache[shard]["images"][offset]).float().div_(255.0).sub_(0.5)
        if offset % 2:
            image = image.flip(-1)
        return image, int(self.cache[shard]["labels"][offset])


class SmallCNN(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.head = nn.Linear(2 * width * 8 * 8, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.head(x.flatten(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32, help="examples per step and process")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "stepwatch-example-shards")
    args = parser.parse_args()

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    cuda = torch.cuda.is_available()
    if distributed:
        dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank() if distributed else 0
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    if rank == 0:
        write_dataset(args.data, args.shards, seed=0)
    if distributed:
        dist.barrier()  # the files are written before any rank reads them
    dataset = ShardDataset(write_dataset(args.data, args.shards, seed=0))
    sampler = DistributedSampler(dataset, shuffle=True, seed=0) if distributed else None
    loader = DataLoader(
        dataset, batch_size=args.batch, shuffle=sampler is None, sampler=sampler, num_workers=args.workers,
        pin_memory=cuda, drop_last=True, persistent_workers=args.workers > 0,
    )  # fmt: skip

    torch.manual_seed(0)
    model = SmallCNN(args.width).to(device)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    try:
        for epoch in range(args.epochs):
            if sampler is not None:
                sampler.set_epoch(epoch)
            for images, labels in stepwatch.steps(loader, examples_per_step=args.batch):
                images = images.to(device, non_blocking=True)
                labels = labels.to(device, non_blocking=True)
                optimizer.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(images), labels)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
            if rank == 0:
                print(f"epoch {epoch + 1}: loss {loss.item():.4f}", flush=True)
    finally:
        if distributed:
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
