"""`zarrpipe rechunk` read back by zarr-python and xarray: the rewritten store (Zarr v3, new
chunks, shards and codec) holds the same values, dims, coordinates and attributes as the store
xarray or zarr-python wrote, and zarrpipe's Python package reads it too.

Runs the `zarrpipe` program that `cargo test --workspace` builds (target/debug/zarrpipe), or
the one named by ZARRPIPE_BIN; CI sets ZARRPIPE_BIN and installs zarr and xarray, so there
nothing here is skipped."""

from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import as_numpy, expected, store

REQUIRED = "ZARRPIPE_BIN" in os.environ
BINARY = Path(os.environ.get("ZARRPIPE_BIN", Path(__file__).resolve().parents[2] / "target" / "debug" / "zarrpipe"))


def need(module: str):
    if REQUIRED:
        return __import__(module)
    return pytest.importorskip(module)


@pytest.fixture(scope="module")
def binary() -> Path:
    if not BINARY.exists():
        if REQUIRED:
            pytest.fail(f"ZARRPIPE_BIN={BINARY} does not exist")
        pytest.skip(f"skipped: no zarrpipe program at {BINARY} (run cargo test --workspace first)")
    return BINARY


def rechunk(binary: Path, source: str, destination: Path, *options: str) -> None:
    run = subprocess.run([str(binary), "rechunk", source, str(destination), *options], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def same_attrs(a: dict, b: dict) -> bool:
    """Equal attributes, NaN equal to NaN."""
    if a.keys() != b.keys():
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, (float, np.floating)) and isinstance(y, (float, np.floating)) and math.isnan(x) and math.isnan(y):
            continue
        if np.any(x != y):
            return False
    return True


@pytest.mark.parametrize("name", ["xr_v2", "xr_v3"])
def test_xarray_reads_the_rechunked_store_back_equal(binary, tmp_path, name):
    xr = need("xarray")
    zarr = need("zarr")
    out = tmp_path / name
    rechunk(binary, store(name), out, "--chunks", "time=1,latitude=4,longitude=8",
            "--shard", "latitude=8,longitude=16", "--codec", "zstd:3")

    source = xr.open_zarr(store(name)).load()
    result = xr.open_zarr(out).load()
    xr.testing.assert_identical(source, result)  # values, dims, coords, attrs
    # Undecoded too: the stored values and every attribute (fill values included).
    raw_source = xr.open_zarr(store(name), decode_cf=False, mask_and_scale=False).load()
    raw_result = xr.open_zarr(out, decode_cf=False, mask_and_scale=False).load()
    assert list(raw_result.variables) == list(raw_source.variables)
    for variable in raw_source.variables:
        a, b = raw_source[variable], raw_result[variable]
        assert a.dims == b.dims and a.dtype == b.dtype, variable
        np.testing.assert_array_equal(a.values, b.values, err_msg=variable)
        assert same_attrs(a.attrs, b.attrs), (variable, a.attrs, b.attrs)
    assert result.attrs == source.attrs

    group = zarr.open_group(out, mode="r")
    assert group.metadata.zarr_format == 3
    assert group.metadata.consolidated_metadata is not None
    z = group["z"]
    assert z.chunks == (1, 2, 4, 8) and z.shards == (1, 2, 8, 16)
    np.testing.assert_array_equal(z[...], expected(name, "z"))


def test_zarr_python_reads_big_endian_v2_and_nested_v3_back_equal(binary, tmp_path):
    zarr = need("zarr")
    v2 = tmp_path / "zp3_v2"
    rechunk(binary, store("zp3_v2"), v2, "--var", "f4_bigendian", "--var", "i2_bigendian_raw",
            "--chunks", "dim_0=3", "--codec", "blosc-lz4")
    group = zarr.open_group(v2, mode="r")
    for name in ["f4_bigendian", "i2_bigendian_raw"]:
        array = group[name]
        source = zarr.open_array(store("zp3_v2"), path=name, mode="r")
        np.testing.assert_array_equal(array[...], expected("zp3_v2", name))
        assert array.dtype == source.dtype.newbyteorder("<") and array.chunks[0] == 3
        assert dict(array.attrs) == dict(source.attrs)
    assert sorted(group.array_keys()) == ["f4_bigendian", "i2_bigendian_raw"]

    v3 = tmp_path / "zp3_v3"
    rechunk(binary, store("zp3_v3"), v3, "--chunks", "y=7,x=6", "--shard", "y=14,x=12")
    source = zarr.open_group(store("zp3_v3"), mode="r")
    result = zarr.open_group(v3, mode="r")
    assert dict(result.attrs) == dict(source.attrs)
    for name in ["f32_sharded_sparse", "f32_transpose", "i16_missing", "bool_zstd", "nested/i32_zstd"]:
        a, b = source[name], result[name]
        np.testing.assert_array_equal(b[...], expected("zp3_v3", name), err_msg=name)
        assert a.metadata.dimension_names == b.metadata.dimension_names, name
        assert dict(a.attrs) == dict(b.attrs), name
        assert b.shards is not None and b.chunks[-2:] == (7, 6), name
        fill_a, fill_b = a.metadata.fill_value, b.metadata.fill_value
        assert fill_a == fill_b or (np.isnan(fill_a) and np.isnan(fill_b)), name


def test_zarrpipe_streams_the_rechunked_store_as_the_source(binary, tmp_path):
    zarrpipe = need("zarrpipe")
    out = tmp_path / "out"
    rechunk(binary, store("xr_v3"), out, "--chunks", "time=1,latitude=6,longitude=8", "--codec", "blosc-zstd")
    pipes = [zarrpipe.Pipeline(path, variables=["t2m", "z", "tp"], batch_size=4) for path in (store("xr_v3"), str(out))]
    got = [np.concatenate([as_numpy(b.inputs) for b in pipe]) for pipe in pipes]
    assert got[0].shape == (6, 5, 11, 15)
    # Bit for bit, NaNs included.
    np.testing.assert_array_equal(got[1].view(np.uint32), got[0].view(np.uint32))


def test_rechunk_and_advise_from_python(tmp_path):
    zarrpipe = need("zarrpipe")
    zarr = need("zarr")
    out = tmp_path / "out"
    report = zarrpipe.rechunk(store("xr_v2"), out, {"time": 2, "latitude": 4}, shards={"latitude": 8}, codec="gzip:1")
    assert report["arrays"] == 9 and report["written"] == report["chunks"]
    t2m = zarr.open_array(out, path="t2m", mode="r")
    assert t2m.chunks == (2, 4, 8) and t2m.shards == (2, 8, 8)
    np.testing.assert_array_equal(t2m[...], expected("xr_v2", "t2m"))
    with pytest.raises(zarrpipe.ZarrpipeError, match="not empty"):
        zarrpipe.rechunk(store("xr_v2"), out, {"time": 1})
    with pytest.raises(zarrpipe.ZarrpipeError, match="dimension \"lat\""):
        zarrpipe.rechunk(store("xr_v2"), tmp_path / "other", {"lat": 1})
    advice = zarrpipe.advise(store("xr_v2"), "t2m")
    assert advice["variable"] == "t2m" and len(advice["candidates"]) == 5
    assert advice["candidates"][advice["best"]]["feed_bytes_per_s"] > 0
    assert advice["decode_on"] in ("cpu", "auto") and advice["decode_on_reason"]
