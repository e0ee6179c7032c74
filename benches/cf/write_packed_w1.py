"""W1's four surface fields packed as ERA5's netCDF files pack them, written by xarray.

    python benches/cf/write_packed_w1.py SOURCE.zarr PACKED.zarr

Reads t2m, u10, v10 and msl from a store written by `zarrpipe generate`, rounds them to whole
units (K, m/s, Pa: the store stays small enough to carry to a GPU host) and writes them as
int16 with `scale_factor`, `add_offset` and `_FillValue` -32767 (zstd), the encoding xarray
gives a netCDF variable packed that way. The CF decoding benchmark in docs/benchmarks.md
("CF decoding in the GPU's gather kernel") reads both stores.
"""

import sys

import numpy as np
import xarray as xr
import zarr

FIELDS = ["t2m", "u10", "v10", "msl"]


def packing(values):
    """scale_factor and add_offset that map the field's range onto int16, as ERA5's do."""
    low, high = float(np.nanmin(values)), float(np.nanmax(values))
    scale = (high - low) / (2**16 - 2) or 1.0
    return scale, low + scale * 32767


def main(source, destination):
    dataset = xr.open_zarr(source, consolidated=False)[FIELDS].load().round()
    encoding = {}
    for name in FIELDS:
        scale, offset = packing(dataset[name].values)
        encoding[name] = {
            "dtype": "int16",
            "scale_factor": scale,
            "add_offset": offset,
            "_FillValue": -32767,
            "compressors": [zarr.codecs.ZstdCodec(level=3)],
            "chunks": (1,) + dataset[name].shape[1:],
        }
    dataset.to_zarr(destination, mode="w", encoding=encoding, consolidated=False)


if __name__ == "__main__":
    main(*sys.argv[1:3])
