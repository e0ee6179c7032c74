"""# 02: CPU batches into torch

Batches decoded on every CPU core, as torch tensors over zarrpipe's own memory (no copy), fed
to a tiny model for one epoch per `set_epoch`, with a tqdm progress bar if tqdm is there.

    python examples/python/02_cpu_batches_into_torch.py [URL]
"""

import sys
import time

import torch

import zarrpipe

# --- 1. The pipeline: 64 x 64 patches of three variables, shuffled per epoch ---
url = sys.argv[1] if len(sys.argv) > 1 else zarrpipe.sample_dataset()
pipe = zarrpipe.Pipeline(url, variables=["t2m", "u10", "z"],
                         input_dims={"latitude": 64, "longitude": 64},
                         batch_size=8, shuffle=True, seed=0, nan_fill=0.0)
channels = len(pipe.channels)
print(pipe)

# --- 2. A model and two epochs ---
model = torch.nn.Conv2d(channels, channels, kernel_size=3, padding=1)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
try:
    from tqdm import tqdm
except ImportError:
    def tqdm(iterable, **_):
        return iterable

for epoch in range(2):
    pipe.set_epoch(epoch)
    started, samples = time.perf_counter(), 0
    for batch in tqdm(pipe, desc=f"epoch {epoch}"):
        loss = (model(batch.inputs) - batch.inputs).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        samples += len(batch)
    seconds = time.perf_counter() - started
    print(f"epoch {epoch}: {samples} samples in {seconds:.2f} s ({samples / seconds:.0f}/s), "
          f"last loss {loss.item():.3f}")
