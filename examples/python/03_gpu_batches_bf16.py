"""# 03: GPU batches, normalised, in bfloat16

Chunks decoded and batches collated on the GPU (a wheel built with `--features cuda`, nvCOMP 6
at run time), normalised per channel with the dataset's statistics, delivered as bfloat16
torch tensors in zarrpipe's device memory. torch's stream waits for each batch on the GPU: the
host never synchronises until the timing below.

    python examples/python/03_gpu_batches_bf16.py [URL]
"""

import sys
import time

import torch

import zarrpipe

# --- 1. Statistics for normalisation (every chunk read once; save them for later runs) ---
url = sys.argv[1] if len(sys.argv) > 1 else zarrpipe.sample_dataset()
variables = ["t2m", "u10", "z"]
stats = zarrpipe.stats(url, variables)
for entry in stats["channels"]:
    print(f"{entry['channel']}: mean {entry['mean']:.3f}, std {entry['std']:.3f}")

# --- 2. The GPU pipeline ---
pipe = zarrpipe.Pipeline(url, variables=variables, input_dims={"latitude": 64, "longitude": 64},
                         batch_size=16, normalize=stats, nan_fill=0.0, dtype=torch.bfloat16,
                         device="cuda:0", latitude_weights="latitude")
print(pipe)

# --- 3. One epoch: per-channel means on the GPU ---
started = time.perf_counter()
means = torch.zeros(len(pipe.channels), device="cuda:0", dtype=torch.float64)
for batch in pipe:
    assert batch.inputs.dtype == torch.bfloat16 and batch.inputs.is_cuda
    assert batch.inputs.data_ptr() == batch.device_pointers["inputs"]  # no copy
    weights = batch.latitude_weights[:, None, :, None].to(torch.float64)
    means += (batch.inputs.to(torch.float64) * weights).mean(dim=(0, 2, 3))
torch.cuda.synchronize()
seconds = time.perf_counter() - started
print(f"{len(pipe)} batches in {seconds:.2f} s; area-weighted channel means (about 0 when "
      f"normalised): {(means / len(pipe)).cpu().numpy().round(3)}")
