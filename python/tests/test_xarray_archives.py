"""Batches hold what xarray reads: stores shaped like real archives (ERA5 int16 packing,
uint8 packing, float fill values, netCDF's `_Unsigned`, CDS `valid_time`, a noleap calendar,
an anemoi-like layout, non-ASCII variable names, root arrays) are written into a temporary
folder at test time with the installed xarray / zarr-python, and each batch is compared, bit
for bit, with `xr.open_zarr(path)` (CF decoding on: mask_and_scale=True) cast to float32, NaN
where masked; `mask_and_scale=False` with `xr.open_zarr(path, mask_and_scale=False)` cast to
float32.

`tests/fixtures/make_real_archives.py` writes larger committed versions of the same stores
with what xarray read from them (`tests/fixtures/real_archives/expected.json`)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

xr = pytest.importorskip("xarray")
zarr = pytest.importorskip("zarr")
pd = pytest.importorskip("pandas")

import zarrpipe  # noqa: E402
from conftest import as_numpy  # noqa: E402

DIMS = ("time", "latitude", "longitude")
NT, NLAT, NLON = 6, 4, 5
CHUNKS = (2, 2, 3)  # partial edge chunks along latitude and longitude

pytestmark = pytest.mark.filterwarnings("ignore")


# --- writing the stores ------------------------------------------------------------------


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def grid() -> dict:
    return {"latitude": ("latitude", np.linspace(60.0, -30.0, NLAT)),
            "longitude": ("longitude", np.arange(NLON) * 72.0)}


def times(count: int = NT, start: str = "2020-01-01", step: str = "6h") -> pd.DatetimeIndex:
    return pd.date_range(start, periods=count, freq=step)


def temperatures(seed: int, nan_fraction: float = 0.1, shape=(NT, NLAT, NLON)) -> np.ndarray:
    r = rng(seed)
    values = r.uniform(220.0, 320.0, shape)
    values[r.random(shape) < nan_fraction] = np.nan
    return values


def to_zarr(ds, path, zarr_format: int, encoding: dict) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, zarr_format=zarr_format, consolidated=True, encoding=encoding)
    return str(path)


def write_int16_packed(path, zarr_format: int) -> str:
    """ERA5's packing: int16, scale_factor / add_offset, _FillValue = missing_value = -32767,
    time int32 "hours since 1900-01-01". One chunk is all NaN (in v2, left unwritten: it
    equals the .zarray fill_value)."""
    t2m = temperatures(1)
    t2m[2, 0:2, 0:3] = np.nan
    vmin, vmax = np.nanmin(t2m), np.nanmax(t2m)
    scale_factor = float((vmax - vmin) / (2**16 - 2))
    add_offset = float(vmin + 32767 * scale_factor)
    ds = xr.Dataset({"t2m": (DIMS, t2m, {"units": "K"})},
                    coords={"time": ("time", times()), **grid()})
    return to_zarr(ds, path, zarr_format, {
        "t2m": {"dtype": "int16", "scale_factor": scale_factor, "add_offset": add_offset,
                "_FillValue": -32767, "missing_value": -32767, "chunks": (1, 2, 3)},
        "time": {"units": "hours since 1900-01-01", "calendar": "gregorian", "dtype": "int32"},
    })


def write_uint8_packed(path, zarr_format: int) -> str:
    """uint8 with scale_factor 1/254, add_offset 0, _FillValue 255."""
    r = rng(2)
    tcc = r.random((NT, NLAT, NLON))
    tcc[r.random(tcc.shape) < 0.1] = np.nan
    ds = xr.Dataset({"tcc": (DIMS, tcc)}, coords={"time": ("time", times()), **grid()})
    return to_zarr(ds, path, zarr_format, {
        "tcc": {"dtype": "uint8", "scale_factor": 1.0 / 254.0, "add_offset": 0.0,
                "_FillValue": 255, "chunks": CHUNKS},
    })


def write_float_fills(path, zarr_format: int) -> str:
    """float32 with _FillValue -9999 (sst); _FillValue -9999 and a different missing_value
    -8888 (swh: xarray masks both; written as a plain attribute because xarray refuses to
    encode two); netCDF's default fill 9.969209968386869e36, not a float32 number (sp_nc)."""
    r = rng(3)
    sst = temperatures(4).astype(np.float32)
    swh = r.gamma(2.0, 0.8, (NT, NLAT, NLON)).astype(np.float32)
    swh[r.random(swh.shape) < 0.1] = np.nan
    swh[r.random(swh.shape) < 0.1] = -8888.0
    sp = (101325.0 + r.normal(0.0, 900.0, (NT, NLAT, NLON))).astype(np.float32)
    sp[r.random(sp.shape) < 0.1] = np.nan
    ds = xr.Dataset(
        {"sst": (DIMS, sst), "swh": (DIMS, swh, {"missing_value": np.float32(-8888.0)}),
         "sp_nc": (DIMS, sp)},
        coords={"time": ("time", times()), **grid()})
    return to_zarr(ds, path, zarr_format, {
        "sst": {"_FillValue": np.float32(-9999.0), "chunks": CHUNKS},
        "swh": {"_FillValue": np.float32(-9999.0), "chunks": CHUNKS},
        "sp_nc": {"_FillValue": 9.969209968386869e36, "chunks": CHUNKS},
    })


def write_unsigned(path, zarr_format: int = 2) -> str:
    """Unsigned bytes kept as netCDF4 keeps them: int8 with `_Unsigned: "true"` and
    _FillValue -1 (255), written by hand (the uint8 values viewed as int8)."""
    r = rng(5)
    classes = r.integers(0, 255, (NT, NLAT, NLON), dtype=np.uint8)
    classes[r.random(classes.shape) < 0.1] = 255
    classes[0, 0, :] = [0, 127, 128, 254, 255]
    ds = xr.Dataset({"lsm_class": (DIMS, classes.view(np.int8), {"_Unsigned": "true"})},
                    coords={"time": ("time", times()), **grid()})
    return to_zarr(ds, path, zarr_format,
                   {"lsm_class": {"_FillValue": np.int8(-1), "chunks": CHUNKS}})


def write_valid_time(path, zarr_format: int = 3) -> str:
    """As the CDS delivers ERA5 now: dims (valid_time, latitude, longitude), valid_time int64
    "seconds since 1970-01-01", a scalar `number` coordinate."""
    t2m = temperatures(6).astype(np.float32)
    ds = xr.Dataset(
        {"t2m": (("valid_time", "latitude", "longitude"), t2m)},
        coords={"valid_time": ("valid_time", times(start="2023-06-30T18:00", step="3h")),
                "number": ((), np.int64(0)), **grid()})
    return to_zarr(ds, path, zarr_format, {
        "t2m": {"chunks": CHUNKS},
        "valid_time": {"units": "seconds since 1970-01-01", "dtype": "int64"},
    })


def write_noleap(path, zarr_format: int = 3) -> str:
    """cftime noleap calendar, daily across the end of February 2020 (28 Feb, then 1 Mar)."""
    cftime = pytest.importorskip("cftime")
    days = [cftime.DatetimeNoLeap(2020, 2, 27)]
    for _ in range(NT - 1):
        days.append(days[-1] + pd.Timedelta(days=1).to_pytimedelta())
    tas = temperatures(7).astype(np.float32)
    ds = xr.Dataset({"tas": (DIMS, tas)}, coords={"time": ("time", days), **grid()})
    return to_zarr(ds, path, zarr_format, {
        "tas": {"chunks": CHUNKS},
        "time": {"units": "days since 2000-01-01", "calendar": "noleap", "dtype": "int32"},
    })


UNICODE_NAMES = ["température", "t2m[K]", "rel hum %", "a#b~c"]


def write_unicode(path, zarr_format: int) -> str:
    ds = xr.Dataset(
        {name: (DIMS, temperatures(10 + i).astype(np.float32) - 100 * i)
         for i, name in enumerate(UNICODE_NAMES)},
        coords={"time": ("time", times()), **grid()})
    return to_zarr(ds, path, zarr_format, {name: {"chunks": CHUNKS} for name in UNICODE_NAMES})


def write_anemoi_like(path) -> str:
    """zarr-python v2, anemoi's layout: data (time, variable, ensemble, cell) with variable
    names in the root attributes; zarr-python's default fill_value 0.0 kept, so the exact
    zeros in `data` read as NaN through xarray (v2: .zarray's fill_value is _FillValue)."""
    r = rng(8)
    data = r.normal(0.0, 5.0, (8, 3, 1, 10)).astype(np.float32)
    data[1, 1, 0, [2, 5]] = 0.0
    data[4, 0, 0, 3] = np.nan
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    root.attrs["variables"] = ["2t", "10u", "msl"]
    arrays = {
        "data": (data, ["time", "variable", "ensemble", "cell"], (1, 3, 1, 10)),
        "dates": (np.array(times(8).values, dtype="datetime64[s]"), ["time"], (8,)),
        "latitudes": (r.uniform(-90.0, 90.0, 10), ["cell"], (10,)),
        "longitudes": (r.uniform(0.0, 360.0, 10), ["cell"], (10,)),
    }
    for name, (values, dims, chunks) in arrays.items():
        array = root.create_array(name, shape=values.shape, dtype=values.dtype, chunks=chunks)
        array[...] = values
        array.attrs["_ARRAY_DIMENSIONS"] = dims
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(path))
    return str(path)


def write_levels(path, zarr_format: int = 3) -> str:
    """ERA5 on pressure levels beside a surface field: z (time, level, latitude, longitude)
    on levels 1000, 850, 600, 500 hPa, two levels to a chunk, and t2m (time, lat, lon)."""
    r = rng(12)
    ds = xr.Dataset(
        {"z": (("time", "level", "latitude", "longitude"),
               r.normal(5e4, 3e3, (NT, 4, NLAT, NLON)).astype(np.float32)),
         "t2m": (("time", "latitude", "longitude"), temperatures(13).astype(np.float32))},
        coords={"time": ("time", times()), "level": ("level", [1000, 850, 600, 500]),
                **grid()})
    return to_zarr(ds, path, zarr_format, {"z": {"chunks": (1, 2, NLAT, NLON)}})


def write_root_array(path, zarr_format: int) -> str:
    values = np.arange(100, dtype=np.float32).reshape(10, 10)
    if zarr_format == 2:
        zarr.save(str(path), values, zarr_format=2)
    else:
        array = zarr.create_array(store=str(path), shape=(10, 10), chunks=(4, 4),
                                  dtype="float32", zarr_format=3)
        array[...] = values
    return str(path)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """`archive(write, *args, name=...)`: the path of the store `write(path, *args)` makes,
    written once for the module (the tests only read them)."""
    written: dict = {}

    def make(write, *args, name: str = "store.zarr") -> str:
        key = (write.__name__, args, name)
        if key not in written:
            folder = tmp_path_factory.mktemp(write.__name__.removeprefix("write_"))
            written[key] = write(folder / name, *args)
        return written[key]

    return make


# --- reading -------------------------------------------------------------------------------


def xarray_values(path: str, variable: str, **options) -> np.ndarray:
    """What xr.open_zarr reads for `variable`, cast to float32."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with xr.open_zarr(path, **options) as ds:
            return ds[variable].values.astype(np.float32)


def whole_fields(path: str, variables: list[str], **options) -> tuple[np.ndarray, object]:
    """Every sample of a pipeline over whole fields, in order: [sample, channel, ...]."""
    pipe = zarrpipe.Pipeline(path, variables=variables, batch_size=4, tensors="raw", **options)
    batches = list(pipe)
    assert [i for b in batches for i in b.sample_indices] == list(range(pipe.num_samples))
    return np.concatenate([as_numpy(b.inputs) for b in batches]), pipe


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal as float32, NaN where `want` has NaN, and bit for bit elsewhere (0.0 is not
    -0.0)."""
    assert got.dtype == np.float32
    want = np.asarray(want, dtype=np.float32)
    np.testing.assert_array_equal(got, want)
    numbers = ~np.isnan(want)
    np.testing.assert_array_equal(got[numbers].view(np.uint32), want[numbers].view(np.uint32))


def iterated(pipe: zarrpipe.Pipeline) -> list[str]:
    return [dim["name"] for dim in pipe.dims if dim["iterated"]]


# --- CF decoding: mask_and_scale -------------------------------------------------------------

PACKED = [
    pytest.param(write_int16_packed, "t2m", 2, id="int16-v2"),
    pytest.param(write_int16_packed, "t2m", 3, id="int16-v3"),
    pytest.param(write_uint8_packed, "tcc", 2, id="uint8-v2"),
    pytest.param(write_uint8_packed, "tcc", 3, id="uint8-v3"),
    pytest.param(write_float_fills, "sst", 2, id="fill-9999-v2"),
    pytest.param(write_float_fills, "sst", 3, id="fill-9999-v3"),
    pytest.param(write_float_fills, "swh", 2, id="fill-and-missing-value-v2"),
    pytest.param(write_float_fills, "swh", 3, id="fill-and-missing-value-v3"),
    pytest.param(write_float_fills, "sp_nc", 2, id="netcdf-default-fill-v2"),
    pytest.param(write_float_fills, "sp_nc", 3, id="netcdf-default-fill-v3"),
    pytest.param(write_unsigned, "lsm_class", 2, id="unsigned-int8-v2"),
]


@pytest.mark.parametrize("write, variable, zarr_format", PACKED)
def test_values_equal_xarray_decoded(archive, write, variable, zarr_format):
    path = archive(write, zarr_format)
    want = xarray_values(path, variable)
    assert np.isnan(want).any()  # something is masked
    got, pipe = whole_fields(path, [variable])
    assert pipe.channels == [variable]
    assert pipe.num_samples == NT
    assert got.shape == (NT, 1, NLAT, NLON)
    assert_same(got[:, 0], want)


@pytest.mark.parametrize("write, variable, zarr_format", PACKED)
def test_raw_values_equal_xarray_without_mask_and_scale(archive, write, variable, zarr_format):
    path = archive(write, zarr_format)
    want = xarray_values(path, variable, mask_and_scale=False)
    # Stored numbers: the fill values (-32767, 255, -9999, -8888, 9.96921e36) stay, and
    # _Unsigned is not applied either (xarray's UnsignedIntegerCoder is part of
    # mask_and_scale): int8 values, negative from 128 up.
    assert not np.isnan(want).any()
    got, _ = whole_fields(path, [variable], mask_and_scale=False)
    assert_same(got[:, 0], want)


def test_packed_int16_decodes_in_float64_before_the_cast(archive):
    """xarray decodes int16 with float scale_factor / add_offset (JSON numbers: float64) to
    float64 (`raw * scale_factor + add_offset`, masked first), and only then to float32:
    computing in float32 instead gives a different last bit for about a quarter of these
    values."""
    path = archive(write_int16_packed, 3)
    with xr.open_zarr(path) as ds:
        assert ds["t2m"].dtype == np.float64
    with xr.open_zarr(path, mask_and_scale=False) as raw:
        stored = raw["t2m"].values
        scale, offset = raw["t2m"].attrs["scale_factor"], raw["t2m"].attrs["add_offset"]
    want = np.where(stored == -32767, np.nan, stored.astype(np.float64) * scale + offset)
    in_float32 = stored.astype(np.float32) * np.float32(scale) + np.float32(offset)
    assert (in_float32 != want.astype(np.float32))[stored != -32767].any()
    got, _ = whole_fields(path, ["t2m"])
    assert_same(got[:, 0], want.astype(np.float32))
    assert_same(got[:, 0], xarray_values(path, "t2m"))


def test_several_encodings_side_by_side(archive):
    path = archive(write_float_fills, 3)
    got, pipe = whole_fields(path, ["swh", "sst", "sp_nc"])
    assert pipe.channels == ["swh", "sst", "sp_nc"]
    for channel, variable in enumerate(pipe.channels):
        assert_same(got[:, channel], xarray_values(path, variable))


def test_windows_of_packed_data_equal_xarray_slices(archive):
    path = archive(write_int16_packed, 2)
    want = xarray_values(path, "t2m")
    pipe = zarrpipe.Pipeline(path, variables=["t2m"], input_dims={"latitude": 2, "longitude": 2},
                             batch_size=8, tensors="raw")
    seen = 0
    for batch in pipe:
        for row, (_, (t, lat, lon)) in enumerate(batch.samples):
            assert_same(as_numpy(batch.inputs)[row, 0], want[t, lat : lat + 2, lon : lon + 2])
            seen += 1
    assert seen == pipe.num_samples == NT * 2 * 2


# --- the time dimension by meaning -----------------------------------------------------------


def test_valid_time_is_iterated_by_default(archive):
    path = archive(write_valid_time, name="era5_cds.zarr")
    with xr.open_zarr(path) as ds:
        assert ds["valid_time"].dtype.kind == "M" and ds["t2m"].dims[0] == "valid_time"
    got, pipe = whole_fields(path, ["t2m"])
    assert iterated(pipe) == ["valid_time"]
    assert pipe.num_samples == NT  # one sample per valid_time step
    assert len(pipe) == 2  # batches of 4
    assert_same(got[:, 0], xarray_values(path, "t2m"))


def test_time_dim_names_the_iterated_dim(archive):
    path = archive(write_valid_time, name="era5_cds.zarr")
    got, pipe = whole_fields(path, ["t2m"], time_dim="valid_time")
    assert iterated(pipe) == ["valid_time"]
    assert pipe.num_samples == NT
    assert_same(got[:, 0], xarray_values(path, "t2m"))


def test_forecast_pairs_along_valid_time(archive):
    path = archive(write_valid_time, name="era5_cds.zarr")
    want = xarray_values(path, "t2m")
    pipe = zarrpipe.Pipeline(path, variables=["t2m"], time_dim="valid_time", history=2,
                             leads=[1], batch_size=16, tensors="raw")
    (batch,) = list(pipe)
    # Samples at steps 1..4: inputs steps t-1 and t, target step t + 1.
    assert [origin[0] for _, origin in batch.samples] == [1, 2, 3, 4]
    for row, (_, (t, _, _)) in enumerate(batch.samples):
        assert_same(as_numpy(batch.inputs)[row], want[t - 1 : t + 1])
        assert_same(as_numpy(batch.targets)[row], want[[t + 1]])


def test_an_unknown_time_dim_fails_when_the_pipeline_is_made(archive):
    path = archive(write_valid_time, name="era5_cds.zarr")
    with pytest.raises((zarrpipe.ZarrpipeError, ValueError), match="forecast_time"):
        zarrpipe.Pipeline(path, variables=["t2m"], time_dim="forecast_time")


def test_noleap_calendar_steps_are_regular(archive):
    """28 February is followed by 1 March in the noleap calendar: one day, no missing step
    (read as the proleptic Gregorian calendar it would look like a gap of two days)."""
    path = archive(write_noleap, name="cmip.zarr")
    with xr.open_zarr(path) as ds:
        assert [t.isoformat() for t in ds["time"].values[1:3]] == [
            "2020-02-28T00:00:00", "2020-03-01T00:00:00"]
    got, pipe = whole_fields(path, ["tas"], missing="error")
    assert iterated(pipe) == ["time"]
    assert pipe.num_samples == NT
    assert_same(got[:, 0], xarray_values(path, "tas"))


# --- names and layouts -----------------------------------------------------------------------


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_non_ascii_variable_names_read_as_xarray(archive, zarr_format):
    path = archive(write_unicode, zarr_format, name="names.zarr")
    described = {v["name"] for v in zarrpipe.info(path)["variables"]}
    assert set(UNICODE_NAMES) <= described
    got, pipe = whole_fields(path, UNICODE_NAMES)
    assert pipe.channels == UNICODE_NAMES
    for channel, name in enumerate(UNICODE_NAMES):
        assert_same(got[:, channel], xarray_values(path, name))


@pytest.mark.parametrize("name", UNICODE_NAMES)
def test_each_non_ascii_name_alone(archive, name):
    path = archive(write_unicode, 3, name="names.zarr")
    got, pipe = whole_fields(path, [name])
    assert pipe.variables == [name]
    assert_same(got[:, 0], xarray_values(path, name))


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("folder, name", [("grid.zarr", "grid"), ("grid", "grid")])
def test_a_root_array_is_one_variable_named_after_its_folder(archive, zarr_format, folder, name):
    path = archive(write_root_array, zarr_format, name=folder)
    want = np.arange(100, dtype=np.float32).reshape(10, 10)
    pipe = zarrpipe.Pipeline(path, input_dims={"dim_0": 10, "dim_1": 10}, batch_size=1,
                             tensors="raw")
    assert pipe.variables == [name]
    assert [d["name"] for d in pipe.dims] == ["dim_0", "dim_1"]
    (batch,) = list(pipe)
    assert_same(as_numpy(batch.inputs)[0, 0], want)
    assert float(as_numpy(batch.inputs).mean()) == 49.5
    # Named explicitly, in windows.
    pipe = zarrpipe.Pipeline(path, variables=[name], input_dims={"dim_0": 5, "dim_1": 5},
                             batch_size=4, tensors="raw")
    (batch,) = list(pipe)
    for row, (_, (y, x)) in enumerate(batch.samples):
        assert_same(as_numpy(batch.inputs)[row, 0], want[y : y + 5, x : x + 5])
    assert sorted(origin for _, origin in batch.samples) == [(0, 0), (0, 5), (5, 0), (5, 5)]


def test_anemoi_like_data_equals_xarray(archive):
    """The anemoi layout through xarray: `data` is a variable of dims (time, variable,
    ensemble, cell); `dates` (datetime64, no CF units) is a data variable, not a coordinate.
    Values as xr.open_zarr reads them: the zeros equal to zarr-python's default v2
    fill_value (0.0) are NaN."""
    path = archive(write_anemoi_like, name="anemoi.zarr")
    want = xarray_values(path, "data")
    assert np.isnan(want).sum() == 3  # one NaN, two zeros masked
    pipe = zarrpipe.Pipeline(path, variables=["data"], input_dims={"cell": 10}, batch_size=8,
                             missing="ignore", tensors="raw")
    (batch,) = list(pipe)
    inputs = as_numpy(batch.inputs)
    assert inputs.shape == (8, 3, 10)  # variable x ensemble stacked as 3 channels
    assert_same(inputs, want.reshape(8, 3, 10))


def test_anemoi_variables_are_channels_named_and_picked_by_name(archive):
    """anemoi keeps its variable names in the root attribute `variables`: channels are named
    by them, and `select={"variable": [...]}` picks them in the order given."""
    path = archive(write_anemoi_like, name="anemoi.zarr")
    want = xarray_values(path, "data")
    names = zarr.open_group(path, mode="r").attrs["variables"]
    pipe = zarrpipe.Pipeline(path, variables=["data"], input_dims={"cell": 10}, batch_size=8,
                             missing="ignore", tensors="raw")
    assert pipe.channels == [f"data[variable={name},ensemble=0]" for name in names]
    picked = [names[2], names[0]]
    pipe = zarrpipe.Pipeline(path, variables=["data"], input_dims={"cell": 10}, batch_size=8,
                             missing="ignore", tensors="raw", select={"variable": picked})
    assert pipe.channels == [f"data[variable={name},ensemble=0]" for name in picked]
    (batch,) = list(pipe)
    assert_same(as_numpy(batch.inputs), want[:, [2, 0], 0, :].reshape(8, 2, 10))


def test_levels_are_named_and_picked_by_value(archive):
    """A level variable beside a surface one: channels named by the level's value, a list of
    values picks them in its order, and the surface variable keeps its channel."""
    path = archive(write_levels, name="levels.zarr")
    with xr.open_zarr(path) as ds:
        z = ds["z"].values.astype(np.float32)
        t2m = ds["t2m"].values.astype(np.float32)
    pipe = zarrpipe.Pipeline(path, variables=["t2m", "z"], batch_size=4, tensors="raw",
                             select={"level": [850, 500]})
    assert pipe.channels == ["t2m", "z[level=850]", "z[level=500]"]
    got = np.concatenate([as_numpy(b.inputs) for b in pipe])
    assert_same(got[:, 0], t2m)
    assert_same(got[:, 1], z[:, 1])
    assert_same(got[:, 2], z[:, 3])
    with pytest.raises((zarrpipe.ZarrpipeError, ValueError), match="700"):
        zarrpipe.Pipeline(path, variables=["t2m", "z"], select={"level": [700]})


@pytest.mark.parametrize("write, variables", [
    (write_int16_packed, ["t2m"]),
    (write_float_fills, ["sst", "swh"]),
])
def test_rechunk_keeps_stored_values_and_their_encoding(archive, tmp_path, write, variables):
    """`rechunk` copies the stored values and their encoding (a v2 store's `fill_value`
    becomes v3's `_FillValue`): xarray decodes the copy as it decodes the source."""
    source = archive(write, 2, name="source.zarr")
    target = str(tmp_path / "rechunked.zarr")
    zarrpipe.rechunk(source, target, {"time": 2})
    for variable in variables:
        assert_same(xarray_values(target, variable), xarray_values(source, variable))
        raw = xarray_values(target, variable, mask_and_scale=False)
        assert_same(raw, xarray_values(source, variable, mask_and_scale=False))


def test_anemoi_without_dimension_names_reads_as_later_anemoi(tmp_path):
    """Older anemoi datasets name no dimensions (xarray cannot open them): zarrpipe names
    `data`'s axes as anemoi does now, so time is iterated and the cells windowed."""
    r = rng(9)
    data = r.normal(0.0, 5.0, (8, 3, 1, 10)).astype(np.float32)
    root = zarr.open_group(str(tmp_path / "old.zarr"), mode="w", zarr_format=2)
    root.attrs["variables"] = ["2t", "10u", "msl"]
    array = root.create_array("data", shape=data.shape, dtype="float32", chunks=(1, 3, 1, 10),
                              fill_value=None)
    array[...] = data
    dates = root.create_array("dates", shape=(8,), dtype="datetime64[s]", chunks=(8,))
    dates[...] = np.array(times(8).values, dtype="datetime64[s]")
    path = str(tmp_path / "old.zarr")
    pipe = zarrpipe.Pipeline(path, variables=["data"], input_dims={"cell": 5}, batch_size=16,
                             missing="ignore", tensors="raw")
    assert iterated(pipe) == ["time"]
    assert pipe.num_samples == 16  # 8 steps x 2 windows of 5 cells
    assert pipe.channels == [f"data[variable={name},ensemble=0]" for name in ["2t", "10u", "msl"]]
    (batch,) = list(pipe)
    got = as_numpy(batch.inputs).reshape(8, 2, 3, 5)
    want = data[:, :, 0, :].reshape(8, 3, 2, 5).transpose(0, 2, 1, 3)
    assert_same(got, want)
