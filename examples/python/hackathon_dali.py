"""# The hackathon's DALI loader, as a loader of the training benchmark

The NCAR/NVIDIA ERA5 U-Net hackathon's best loader (`zarr_ML_optimization/era5_dataloader.py`
of `pangeo-data/ncar-hackathon-xarray-on-gpus`: `SeqZarrSource` and `seqzarr_pipeline`),
reproduced so that it stands in the same table as zarrpipe and the xarray + DataLoader
baseline (`train_unet.py --loader dali`):

- a DALI pipeline of one sample a run: an external source gives the batch's number, and a
  `python_function` reads the batch with zarr-python and returns its inputs and targets;
- the batch's time steps `t` and `t + 1` of every variable are read with one orthogonal
  selection per variable, with `zarr.config.enable_gpu()` and CuPy buffers when `gpu` (as the
  hackathon ran it: zarr-python still decompresses on the CPU), then stacked as channels and
  split into input (`t`) and target (`t + 1`);
- batches as the hackathon made them: each rank's share of the time steps cut into
  `batch_size` runs, batch `i` the `i`-th step of each run, the same order every epoch.

Two things are added so that its batches are those of the other loaders: each channel is
normalised by the store's statistics (as zarrpipe and the baseline normalise), on the GPU when
`gpu`; a level variable gives a channel per level (as zarrpipe stacks them). Epochs follow each
other without end (the hackathon's source stops the pipeline after one).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Iterator

import numpy as np


class SeqZarrSource:
    """Reads batch `index` of the store's (input, target) pairs with zarr-python."""

    def __init__(self, store: str, variables: list[str], batch_size: int, statistics: dict,
                 rank: int = 0, world_size: int = 1, gpu: bool = True):
        import zarr

        self.store, self.variables, self.batch_size, self.gpu = store, variables, batch_size, gpu
        group = zarr.open_group(store, mode="r")
        steps = group[variables[0]].shape[0]
        for name in variables:
            if group[name].shape[0] != steps:
                raise ValueError(f"{name} has {group[name].shape[0]} time steps, not {steps}")
        # The hackathon's split: whole batches on every rank, each rank a run of the pairs.
        usable = batch_size * world_size * ((steps - 1) // batch_size // world_size)
        indices = np.array_split(np.arange(usable), world_size)[rank]
        if len(indices) < batch_size:
            raise ValueError(f"{steps - 1} pairs of steps: not one batch of {batch_size} "
                             f"for each of {world_size} ranks")
        self.batch_mapping = np.stack(np.array_split(indices, batch_size), axis=1)
        # Per channel, in the order the variables stack (a level variable: one per level).
        channels = [c for v in variables for c in statistics["channels"] if c["variable"] == v]
        self.mean = np.array([c["mean"] for c in channels], dtype=np.float32)[:, None, None]
        self.std = np.array([c["std"] for c in channels], dtype=np.float32)[:, None, None]
        self.group = None  # opened in the pipeline's thread, on first use

    def __len__(self) -> int:
        return self.batch_mapping.shape[0]

    def __call__(self, index) -> tuple[list, list]:
        import zarr

        xp = np
        if self.gpu:
            import cupy as xp
        with zarr.config.enable_gpu() if self.gpu else nullcontext():
            if self.group is None:
                self.group = zarr.open_group(self.store, mode="r")
            number = int(index[0])  # one sample: the batch's number
            steps = self.batch_mapping[number % len(self)]
            times = np.concatenate([[t, t + 1] for t in steps])
            fields = []
            for name in self.variables:
                data = xp.asarray(self.group[name].oindex[times])
                fields.append(data.reshape(len(times), -1, *data.shape[-2:]))
            stacked = xp.concatenate(fields, axis=1).astype(xp.float32)
            stacked = (stacked - xp.asarray(self.mean)) / xp.asarray(self.std)
            pairs = stacked.reshape(self.batch_size, 2, *stacked.shape[1:])
            return [xp.ascontiguousarray(pairs[:, 0])], [xp.ascontiguousarray(pairs[:, 1])]


def pipeline(source: SeqZarrSource, device_id: int | None):
    """The hackathon's `seqzarr_pipeline`: batch numbers in, (inputs, targets) out, on the
    GPU (`device_id`) or, with `None`, on the CPU alone."""
    import nvidia.dali as dali

    gpu = source.gpu and device_id is not None
    pipe = dali.Pipeline(batch_size=1, num_threads=2, prefetch_queue_depth=2, py_num_workers=2,
                         device_id=device_id, py_start_method="spawn")
    with pipe:
        indexes = dali.fn.external_source(source=lambda number: np.array([number]),
                                          dtype=dali.types.INT64,
                                          device="gpu" if gpu else "cpu")
        inputs, targets = dali.fn.python_function(indexes, function=source, batch_processing=True,
                                                  num_outputs=2, device="gpu" if gpu else "cpu")
        if device_id is not None and not gpu:
            inputs, targets = inputs.gpu(), targets.gpu()
        pipe.set_outputs(inputs, targets)
    pipe.build()
    return pipe


def batches(args, device) -> Iterator:
    """(inputs, targets) torch tensors on `device`, batch after batch, epoch after epoch."""
    import torch
    from nvidia.dali.plugin.pytorch import feed_ndarray

    rank, world = 0, 1
    if args.distributed:
        rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    cuda = device.type == "cuda"
    source = SeqZarrSource(args.store, args.variables, args.batch_size, args.statistics,
                           rank, world, gpu=cuda and args.dali_zarr_gpu)
    pipe = pipeline(source, device.index if cuda else None)
    stream = torch.cuda.current_stream(device) if cuda else None
    while True:
        outputs = pipe.run()
        tensors = []
        for output in outputs:
            sample = output.as_tensor()
            tensor = torch.empty(sample.shape()[1:], dtype=torch.float32, device=device)
            feed_ndarray(sample, tensor.unsqueeze(0), cuda_stream=stream)
            tensors.append(tensor)
        yield tensors[0], tensors[1]
