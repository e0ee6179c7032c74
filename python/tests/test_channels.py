"""Static and derived channels through the Python package, on the xarray fixture `xr_static`
(t2m beside the static fields orography and lsm, times across the 2019/2020 year end):
static windows equal zarr-python's values, derived channels equal the formulas computed
here with numpy from the stored coordinates (times decoded from their CF units here, as
xarray decodes them; the package needs only NumPy, so xarray is not imported)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import zarrpipe
from conftest import as_numpy, expected, store


def times() -> np.ndarray:
    """The time coordinate as datetime64: its int64 values in the CF units of its metadata."""
    with open(f"{store('xr_static')}/time/zarr.json", encoding="utf-8") as file:
        units = json.load(file)["attributes"]["units"]
    unit, since = units.split(" since ")
    assert unit == "hours", units
    epoch = np.datetime64(since.strip().replace(" ", "T"), "ns")
    return epoch + expected("xr_static", "time").astype(np.int64) * np.timedelta64(1, "h")

NAMES = [
    "t2m",
    "orography",
    "lsm",
    "sin_lat",
    "cos_lat",
    "sin_lon",
    "cos_lon",
    "sin_time_of_day",
    "cos_time_of_day",
    "sin_local_time",
    "cos_local_time",
    "sin_day_of_year",
    "cos_day_of_year",
    "cos_zenith",
]


def derived_fields(time: np.datetime64, lat: np.ndarray, lon: np.ndarray) -> dict[str, np.ndarray]:
    """Every derived channel on the (lat, lon) grid at `time`, in float64: earthkit-data's
    forcings and earthkit-meteo's cosine of the solar zenith angle (with fractional hours)."""
    stamp = np.datetime64(time, "ns")
    midnight = stamp.astype("datetime64[D]")
    year_start = stamp.astype("datetime64[Y]").astype("datetime64[D]")
    hours = (stamp - midnight) / np.timedelta64(1, "h")
    day = (stamp - year_start) / np.timedelta64(1, "D")
    lat2, lon2 = np.meshgrid(np.radians(lat), np.radians(lon), indexing="ij")
    local = (np.degrees(lon2) / 360.0 * 24.0 + hours) % 24.0
    angle = 2 * np.pi * day / 365.25
    declination = np.radians(
        0.396372
        - 22.91327 * np.cos(angle)
        + 4.025430 * np.sin(angle)
        - 0.387205 * np.cos(2 * angle)
        + 0.051967 * np.sin(2 * angle)
        - 0.154527 * np.cos(3 * angle)
        + 0.084798 * np.sin(3 * angle)
    )
    correction = (
        0.004297
        + 0.107029 * np.cos(angle)
        - 1.837877 * np.sin(angle)
        - 0.837378 * np.cos(2 * angle)
        - 2.340475 * np.sin(2 * angle)
    )
    hour_angle = np.radians((hours - 12.0) * 15.0 + np.degrees(lon2) + correction)
    zenith = np.sin(declination) * np.sin(lat2) + np.cos(declination) * np.cos(lat2) * np.cos(hour_angle)
    full = lambda value: np.full(lat2.shape, value)  # noqa: E731
    return {
        "sin_lat": np.sin(lat2),
        "cos_lat": np.cos(lat2),
        "sin_lon": np.sin(lon2),
        "cos_lon": np.cos(lon2),
        "sin_time_of_day": full(np.sin(2 * np.pi * hours / 24.0)),
        "cos_time_of_day": full(np.cos(2 * np.pi * hours / 24.0)),
        "sin_local_time": np.sin(2 * np.pi * local / 24.0),
        "cos_local_time": np.cos(2 * np.pi * local / 24.0),
        "sin_day_of_year": full(np.sin(angle)),
        "cos_day_of_year": full(np.cos(angle)),
        "cos_zenith": np.clip(zenith, 0.0, None),
    }


def test_static_and_derived_channels_equal_numpy():
    path = store("xr_static")
    pipe = zarrpipe.Pipeline(
        path,
        variables=NAMES,
        input_dims={"latitude": 4, "longitude": 5},
        input_overlap={"latitude": 1, "longitude": 1},
        batch_size=4,
    )
    assert pipe.channels == NAMES
    assert pipe.variables == ["t2m", "orography", "lsm"]
    t2m, orography, lsm = (expected("xr_static", v) for v in ("t2m", "orography", "lsm"))
    lat = expected("xr_static", "latitude")
    lon = expected("xr_static", "longitude").astype(np.float64)
    when = times()
    assert str(when[0]).startswith("2019-12-30T21:00")
    samples = 0
    for batch in pipe:
        inputs = as_numpy(batch.inputs)
        for row, index in enumerate(batch.sample_indices):
            # Samples in C order over (time, latitude window, longitude window): 6 x 2 x 2.
            t, rest = divmod(index, 4)
            y0, x0 = (rest // 2) * 3, (rest % 2) * 4
            window = (slice(y0, y0 + 4), slice(x0, x0 + 5))
            got = inputs[row]
            np.testing.assert_array_equal(got[0], t2m[t][window])
            np.testing.assert_array_equal(got[1], orography[window])  # NaN at (2, 3) included
            np.testing.assert_array_equal(got[2], lsm[window].astype(np.float32))
            fields = derived_fields(when[t], lat[window[0]], lon[window[1]])
            for channel, name in enumerate(NAMES[3:], start=3):
                np.testing.assert_allclose(got[channel], fields[name], rtol=0, atol=1e-5, err_msg=name)
            samples += 1
    assert samples == 6 * 2 * 2


def test_unknown_channel_names_list_the_derived_ones():
    with pytest.raises(zarrpipe.StoreError, match="no variable `cos_latitude`") as raised:
        zarrpipe.Pipeline(store("xr_static"), variables=["t2m", "cos_latitude"])
    assert "cos_zenith" in str(raised.value)
    assert raised.value.variable == "cos_latitude"


def test_derived_channels_need_their_dimension_windowed_or_iterated():
    with pytest.raises(zarrpipe.CollateError, match="derived channel `cos_lat`.*windowed or iterated"):
        zarrpipe.Pipeline(store("xr_static"), variables=["t2m", "cos_lat"], input_dims={"longitude": 9})


def test_normalize_true_computes_statistics_of_the_stored_variables_only():
    path = store("xr_static")
    names = ["t2m", "orography", "cos_zenith"]
    plain = np.concatenate([as_numpy(b.inputs) for b in zarrpipe.Pipeline(path, variables=names, batch_size=6)])
    normalised = zarrpipe.Pipeline(path, variables=names, batch_size=6, normalize=True)
    values = np.concatenate([as_numpy(b.inputs) for b in normalised])
    # Per channel (each of these variables is one channel), as normalize reads them.
    report = zarrpipe.stats(path, ["t2m", "orography"])
    stats = {entry["channel"]: entry for entry in report["channels"]}
    for channel, name in enumerate(names[:2]):
        mean, std = np.float32(stats[name]["mean"]), np.float32(stats[name]["std"])
        np.testing.assert_array_equal(values[:, channel], (plain[:, channel] - mean) / std)
    # No statistics name cos_zenith: it is delivered as computed.
    np.testing.assert_array_equal(values[:, 2], plain[:, 2])
