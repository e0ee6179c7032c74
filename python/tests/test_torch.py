"""CPU batches as torch tensors (skipped, with the reason, where torch is not installed)."""

from __future__ import annotations

import numpy as np
import pytest

import zarrpipe
from conftest import expected, store

torch = pytest.importorskip("torch", reason="torch is not installed: batches are NumPy arrays")


def test_cpu_batches_are_torch_tensors_over_zarrpipe_memory():
    pipe = zarrpipe.Pipeline(store("xr_v3"), variables=["t2m", "z"], batch_size=6, nan_mask=True,
                             history=1, leads=[1])
    (batch,) = list(pipe)
    assert isinstance(batch.inputs, torch.Tensor) and batch.inputs.dtype == torch.float32
    assert batch.inputs.device.type == "cpu" and batch.inputs.is_contiguous()
    assert batch.nan_mask.dtype == torch.uint8 and batch.targets.shape == batch.inputs.shape
    t2m = expected("xr_v3", "t2m")
    want = t2m[[t for _, (t, _, _) in batch.samples]]
    np.testing.assert_array_equal(batch.inputs[:, 0].numpy(), want)


def test_raw_tensors_stay_numpy():
    batch = next(iter(zarrpipe.Pipeline(store("xr_v3"), variables=["t2m"], tensors="raw")))
    assert isinstance(batch.inputs, np.ndarray)
    assert torch.from_dlpack(batch.inputs).data_ptr() == batch.inputs.ctypes.data


def test_ranks_come_from_torch_distributed(tmp_path, monkeypatch):
    distributed = torch.distributed
    if not distributed.is_available():
        pytest.skip("torch.distributed is not available in this torch")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    distributed.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        pipe = zarrpipe.Pipeline(store("xr_v3"), variables=["t2m"], batch_size=1)
        assert (pipe.rank, pipe.world_size) == (0, 1) and len(pipe) == 6
    finally:
        distributed.destroy_process_group()
