"""Shared fixtures: the committed conformance stores (tests/fixtures, written by zarr-python
3.1 and xarray) and the values zarr-python reads from them (tests/fixtures/expected)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(os.environ.get("ZARRPIPE_FIXTURES", Path(__file__).resolve().parents[2] / "tests" / "fixtures"))


def store(name: str) -> str:
    return str(FIXTURES / "stores" / name)


def expected(store_name: str, array: str) -> np.ndarray:
    """What `zarr.open_array(...)[...]` returned for `array` of `store_name`."""
    manifest = json.loads((FIXTURES / "manifest.json").read_text())
    entry = next(s for s in manifest["stores"] if s["store"] == store_name)
    info = next(a for a in entry["arrays"] if a["path"] == array)
    raw = (FIXTURES / "expected" / store_name / (array.replace("/", "__") + ".bin")).read_bytes()
    dtype = np.dtype(info["dtype"]).newbyteorder("<")
    return np.frombuffer(raw, dtype=dtype).reshape(info["shape"])


@pytest.fixture(params=["xr_v2", "xr_v3"])
def xr_store(request) -> tuple[str, str]:
    """(store name, path) of the xarray-written stores, v2 and v3."""
    return request.param, store(request.param)


def as_numpy(tensor) -> np.ndarray:
    """A batch tensor (numpy array or torch tensor) as a numpy array."""
    if isinstance(tensor, np.ndarray):
        return tensor
    return tensor.detach().cpu().numpy()
