"""Batches hold exactly what zarr-python reads from the committed fixture stores (the values
the Rust conformance tests compare against), through the Python package."""

from __future__ import annotations

import numpy as np
import pytest

import zarrpipe
from conftest import as_numpy, expected, store


def batches(pipe: zarrpipe.Pipeline) -> list[zarrpipe.Batch]:
    return list(pipe)


def test_whole_fields_stack_variables_and_levels_as_channels(xr_store):
    name, path = xr_store
    pipe = zarrpipe.Pipeline(path, variables=["t2m", "z", "tp"], batch_size=4, tensors="raw")
    # Levels are named by the level coordinate's values.
    assert pipe.channels == ["t2m", "z[level=1000]", "z[level=850]", "z[level=500]", "tp"]
    assert pipe.sample_shape == (5, 11, 15)
    t2m, z, tp = (expected(name, v) for v in ("t2m", "z", "tp"))
    want = np.concatenate([t2m[:, None], z, tp[:, None].astype(np.float32)], axis=1)
    got = batches(pipe)
    assert [b.inputs.shape for b in got] == [(4, 5, 11, 15), (2, 5, 11, 15)]
    assert len(pipe) == 2
    values = np.concatenate([b.inputs for b in got])
    assert values.dtype == np.float32
    # Bit for bit, NaNs (three in t2m) included.
    np.testing.assert_array_equal(values.view(np.uint32), want.astype(np.float32).view(np.uint32))
    assert [i for b in got for i in b.sample_indices] == list(range(6))


def test_overlapping_windows_equal_array_slices(xr_store):
    name, path = xr_store
    pipe = zarrpipe.Pipeline(
        path,
        variables=["t2m", "cls"],
        input_dims={"latitude": 5, "longitude": 6},
        input_overlap={"latitude": 2},
        batch_size=5,
        tensors="raw",
    )
    t2m, cls = expected(name, "t2m"), expected(name, "cls").astype(np.float32)
    # latitude: origins 0, 3, 6 (stride 3); longitude: 0, 6 (stride 6); 6 time steps.
    assert pipe.num_samples == 6 * 3 * 2
    seen = 0
    for batch in pipe:
        for row, (_, (t, lat, lon)) in enumerate(batch.samples):
            window = np.s_[t, lat : lat + 5, lon : lon + 6]
            np.testing.assert_array_equal(batch.inputs[row, 0], t2m[window])
            np.testing.assert_array_equal(batch.inputs[row, 1], cls[window])
            seen += 1
    assert seen == pipe.num_samples


@pytest.mark.parametrize(
    "array",
    ["f32_zstd", "f64_gzip", "i16_blosc_lz4", "f32_sharded", "f32_sharded_sparse", "f32_missing",
     "f32_bigendian", "f32_zstd_crc32c", "i16_missing", "nested/i32_zstd"],
)
def test_zarr_python_arrays_read_back_as_written(array):
    want = expected("zp3_v3", array).astype(np.float32)
    height, width = want.shape
    size_y, size_x = min(4, height), min(5, width)
    pipe = zarrpipe.Pipeline(
        store("zp3_v3"),
        variables=[array],
        input_dims={"y": size_y, "x": size_x},
        batch_size=16,
        tensors="raw",
    )
    count = 0
    for batch in pipe:
        assert batch.inputs.shape[1:] == (1, size_y, size_x)
        for row, (_, (y, x)) in enumerate(batch.samples):
            got = batch.inputs[row, 0]
            np.testing.assert_array_equal(got, want[y : y + size_y, x : x + size_x])
            count += 1
    assert count == (height // size_y) * (width // size_x)


def test_forecast_pairs_hold_history_and_leads(xr_store):
    name, path = xr_store
    pipe = zarrpipe.Pipeline(path, variables=["t2m"], history=2, leads=[1, 2], batch_size=8,
                             tensors="raw")
    t2m = expected(name, "t2m")
    (batch,) = batches(pipe)
    # Samples at steps 1..3: two input steps ending there, targets one and two steps ahead.
    assert [origin[0] for _, origin in batch.samples] == [1, 2, 3]
    for row, (_, (t, _, _)) in enumerate(batch.samples):
        np.testing.assert_array_equal(as_numpy(batch.inputs)[row], t2m[t - 1 : t + 1])
        np.testing.assert_array_equal(as_numpy(batch.targets)[row], t2m[[t + 1, t + 2]])


def test_padded_edges_carry_a_mask():
    pipe = zarrpipe.Pipeline(store("xr_v3"), variables=["t2m"], input_dims={"latitude": 11, "longitude": 10},
                             edge="pad", batch_size=64, tensors="raw")
    (batch,) = batches(pipe)
    assert batch.mask is not None and batch.mask.dtype == np.uint8
    last = [row for row, (_, origin) in enumerate(batch.samples) if origin[2] == 10][0]
    assert batch.mask[last, :, :5].all() and not batch.mask[last, :, 5:].any()


def test_normalisation_nan_fill_and_masks(xr_store):
    name, path = xr_store
    stats = zarrpipe.stats(path, ["t2m"])
    assert stats["variables"][0]["variable"] == "t2m" and stats["variables"][0]["nan_count"] == 3
    assert stats["channels"][0]["channel"] == "t2m" and stats["channels"][0]["nan_count"] == 3
    pipe = zarrpipe.Pipeline(path, variables=["t2m"], normalize=stats, nan_fill=0.0,
                             nan_mask=True, latitude_weights="latitude", batch_size=6,
                             tensors="raw")
    (batch,) = batches(pipe)
    t2m = expected(name, "t2m")
    mean, std = np.float32(stats["channels"][0]["mean"]), np.float32(stats["channels"][0]["std"])
    want = np.where(np.isnan(t2m), np.float32(0), (t2m - mean) / std).astype(np.float32)
    np.testing.assert_allclose(batch.inputs[:, 0], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(batch.nan_mask[:, 0], (~np.isnan(t2m)).astype(np.uint8))
    assert batch.latitude_weights.shape == (6, 11)
    np.testing.assert_allclose(batch.latitude_weights.mean(axis=1), 1.0, rtol=1e-5)


def test_info_describes_the_dataset():
    described = zarrpipe.info(store("xr_v3"))
    names = {v["name"] for v in described["variables"]}
    assert {"t2m", "z", "tp", "time", "latitude"} <= names
    z = next(v for v in described["variables"] if v["name"] == "z")
    assert z["dims"] == ["time", "level", "latitude", "longitude"] and z["shape"] == [6, 3, 11, 15]


def test_works_with_tqdm():
    tqdm = pytest.importorskip("tqdm").tqdm
    pipe = zarrpipe.Pipeline(store("xr_v2"), variables=["t2m"], batch_size=4)
    assert len(list(tqdm(pipe))) == len(pipe) == 2
