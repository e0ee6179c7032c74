"""# 01: open a dataset and look at it

What a Zarr store holds (variables, dims, chunks, codecs), what a pipeline over it will
deliver (channels, sample shape, batches per epoch), and one batch.

    python examples/python/01_open_dataset.py [URL]

Without a URL it writes and uses zarrpipe's sample dataset (data/sample.zarr).
"""

import sys
import time

import zarrpipe

# --- 1. The dataset ---
url = sys.argv[1] if len(sys.argv) > 1 else zarrpipe.sample_dataset()
info = zarrpipe.info(url)
print(f"{url}: Zarr v{info['zarr_format']}, consolidated: {info['consolidated']}, dims {info['dims']}")
for variable in info["variables"]:
    print(f"  {variable['name']:<10} {variable['dtype']:<8} {str(variable['shape']):<18} "
          f"chunks {variable['chunk_shape']} {'+'.join(variable['codecs'])}")

# --- 2. A pipeline over it ---
pipe = zarrpipe.Pipeline(url, input_dims={"latitude": 64, "longitude": 64}, batch_size=8)
print(pipe)
print("channels:", pipe.channels)
for dim in pipe.dims:
    print("  ", dim)

# --- 3. One batch ---
started = time.perf_counter()
batch = next(iter(pipe))
print(f"batch {batch.index}: inputs {tuple(batch.inputs.shape)} {batch.inputs.dtype}, "
      f"{len(batch)} samples, first origin {batch.samples[0][1]}, "
      f"{(time.perf_counter() - started) * 1e3:.1f} ms")
