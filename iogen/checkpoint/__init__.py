"""Checkpoint emulation: model sizes, the layout on storage, the native writer and restore.

- `model`: bytes per rank and file, as DLIO computes them (transformer layers, ZeRO, TP/PP/DP);
- `layout`: checkpoint folders and DeepSpeed/Megatron file names;
- `torchzip`: the PyTorch zip framing, streamed (never building tensors);
- `io`: write and restore checkpoint files or objects through the storage layer (on files the core's
  block writer and reader: pwrite/pread, threads, O_DIRECT, fsync);
- `training`: checkpoints during training (unet3d, bert); `phases`: checkpoint-only runs.
"""
from .training import Checkpointer

__all__ = ["Checkpointer"]
