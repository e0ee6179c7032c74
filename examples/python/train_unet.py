"""# The ERA5 U-Net trained on zarrpipe's batches (the training benchmark)

The experiment of the NCAR/NVIDIA ERA5 U-Net hackathon (`zarr_ML_optimization/train_unet.py`),
with zarrpipe as the loader: a U-Net with a resnet18 encoder forecasts the next time step of
whole 640 x 1280 fields (input at t, target at t+1), AdamW, MSE loss, batch 16. Three bars:
training on real data, the loader alone (`--no-training`), training on synthetic data.

    python examples/python/train_unet.py --loader synthetic
    python examples/python/train_unet.py --loader zarrpipe --mode gpu STORE
    python examples/python/train_unet.py --loader zarrpipe --mode cpu STORE  # CPU decode, GPU collate
    python examples/python/train_unet.py --loader zarrpipe --mode split STORE
    python examples/python/train_unet.py --loader zarrpipe --mode auto STORE
    python examples/python/train_unet.py --loader baseline STORE  # xarray + torch DataLoader
    python examples/python/train_unet.py --loader dali STORE  # the hackathon's DALI loader
    ... --no-training                 # the loader alone
    ... --precision bf16              # bf16 autocast, channels-last
    torchrun --nproc-per-node 2 examples/python/train_unet.py --distributed ...
    torchrun --nproc-per-node 2 examples/python/train_unet.py --distributed \
        --device cuda:0 --dist-backend gloo ...   # two ranks sharing one GPU

STORE is written by `zarrpipe generate --variables setup-a` (setup A: t2m and five 500 hPa
fields) or `zarrpipe generate` (setup B: W1's 43 fields, `--variables all`). `--tiny` runs a
few steps on a small grid, on the CPU when there is no GPU. The last line printed is JSON with
every figure (benches/train/run.sh collects them).

How the figures are taken:
- the same number of steps for every loader, after `--warmup` steps that are not timed; the
  device is synchronised before each clock reading;
- samples/s = timed steps x batch / seconds; and over the last half of the timed steps alone
  (on the GPU's timeline): where it falls short of the whole, the batches the loader decoded
  before timing carried the first half, and the run was too short to show its pace;
- data wait: on the GPU's own timeline, from the end of one step's kernels to the moment the
  next batch is there for the model (CUDA events on the training stream): time the GPU had no
  data to train on, whether the host was blocked on the loader or the stream waited for the
  batch's event. On the CPU, the host time spent in `next()`;
- loader GPU time: zarrpipe's own measure (CUDA events around its decode and collate kernels,
  `Pipeline.metrics()["gpu_busy_s"]`) over the timed seconds;
- the loss, averaged over the timed steps and printed every `--log-every` steps, so no loader
  wins by skipping work.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from typing import Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

SETUP_A = ["t2m", "V500", "U500", "T500", "Z500", "Q500"]

# --- 1. The model: a U-Net with a resnet18 encoder -------------------------------------------
# torchvision's resnet18 (BasicBlocks, [2, 2, 2, 2]) as the encoder and
# segmentation_models_pytorch's Unet decoder (channels 256, 128, 64, 32, 16), written out so
# the script needs torch only. No pretrained weights.


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        return F.relu(self.bn2(self.conv2(out)) + identity, inplace=True)


def conv_bn_relu(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class DecoderBlock(nn.Module):
    def __init__(self, cin: int, skip: int, cout: int):
        super().__init__()
        self.conv1 = conv_bn_relu(cin + skip, cout)
        self.conv2 = conv_bn_relu(cout, cout)

    def forward(self, x: torch.Tensor, skip: torch.Tensor | None) -> torch.Tensor:
        x = F.interpolate(x, scale_factor=2, mode="nearest")
        if skip is not None:
            x = torch.cat([x, skip], dim=1)
        return self.conv2(self.conv1(x))


class UNet(nn.Module):
    """Input and output [batch, channels, H, W], H and W multiples of 32."""

    def __init__(self, channels_in: int, channels_out: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        widths = [64, 64, 128, 256, 512]
        self.layers = nn.ModuleList(
            nn.Sequential(BasicBlock(widths[i], widths[i + 1], 1 if i == 0 else 2),
                          BasicBlock(widths[i + 1], widths[i + 1], 1))
            for i in range(4))
        # Skips, deepest first: layer3 (256), layer2 (128), layer1 (64), conv1 (64), none.
        decoder = [256, 128, 64, 32, 16]
        skips = [256, 128, 64, 64, 0]
        cins = [512] + decoder[:-1]
        self.decoder = nn.ModuleList(DecoderBlock(c, s, o) for c, s, o in zip(cins, skips, decoder))
        self.head = nn.Conv2d(decoder[-1], channels_out, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stem = F.relu(self.bn1(self.conv1(x)), inplace=True)  # 1/2
        features = [stem]
        y = F.max_pool2d(stem, 3, 2, 1)  # 1/4
        for layer in self.layers:
            y = layer(y)
            features.append(y)  # 1/4, 1/8, 1/16, 1/32
        skips = features[-2::-1] + [None]  # layer3, layer2, layer1, stem, none
        y = features[-1]
        for block, skip in zip(self.decoder, skips):
            y = block(y, skip)
        return self.head(y)


# --- 2. The loaders: each yields (inputs, targets) on the training device ----------------------


def synthetic_batches(args, channels: int, shape: tuple[int, int], device) -> Iterator:
    """Random tensors made once on the device: the upper bound (no loading at all)."""
    generator = torch.Generator(device=device).manual_seed(0)
    pool = [(torch.randn(args.batch_size, channels, *shape, device=device, generator=generator),
             torch.randn(args.batch_size, channels, *shape, device=device, generator=generator))
            for _ in range(4)]
    while True:
        yield from pool


class ZarrpipeBatches:
    """zarrpipe's Pipeline, epoch after epoch; its metrics summed over the epochs."""

    def __init__(self, args, device):
        import zarrpipe

        self.zarrpipe = zarrpipe
        options = dict(variables=args.variables, history=1, leads=[1], batch_size=args.batch_size,
                       shuffle=True, seed=0, normalize=args.normalize, drop_last=True,
                       prefetch=args.prefetch, device=str(device))
        if device.type == "cuda":
            options["decode_on"] = args.mode
            if args.mode == "auto" and args.gpu_share is not None:
                options["gpu_share"] = args.gpu_share
            if args.mode == "split" and args.gpu_chunks is not None:
                options["gpu_chunks"] = args.gpu_chunks
            if args.cpu_decode_threads is not None:
                options["cpu_decode_threads"] = args.cpu_decode_threads
            if args.gpu_read_memory is not None:
                options["gpu_read_memory"] = int(args.gpu_read_memory * 2**30)
        self.pipe = zarrpipe.Pipeline(args.store, **options)
        self.pipe_batch_size = args.batch_size
        self.finished: dict[str, float] = {}

    def __iter__(self) -> Iterator:
        if len(self.pipe) == 0:
            raise SystemExit(f"{self.pipe.num_samples} samples per epoch: not one batch of "
                             f"{self.pipe_batch_size} (a larger store, or a smaller --batch-size)")
        epoch = 0
        while True:
            self.pipe.set_epoch(epoch)
            for batch in self.pipe:
                yield batch.inputs, batch.targets
            for key, value in self.pipe.metrics().items():
                self.finished[key] = self.finished.get(key, 0) + value
            epoch += 1

    def metrics(self) -> dict[str, float]:
        """Counters of every epoch so far, the one running included."""
        current = self.pipe.metrics()
        return {k: self.finished.get(k, 0) + current.get(k, 0) for k in set(current) | set(self.finished)}


def baseline_batches(args, device) -> Iterator:
    """The hackathon's starting point: xarray opens the store, a torch Dataset returns one
    (input at t, target at t+1) pair as stacked, normalised float32 arrays, and a DataLoader
    with worker processes and pinned memory batches them; batches are copied to the GPU."""
    import numpy as np
    import xarray as xr
    from torch.utils.data import DataLoader, Dataset, DistributedSampler

    import zarrpipe

    # Per channel (each level of a level variable its own), as zarrpipe normalises.
    stats = {}
    for variable in args.variables:
        entries = [c for c in args.statistics["channels"] if c["variable"] == variable]
        stats[variable] = (np.array([c["mean"] for c in entries])[:, None, None],
                           np.array([c["std"] for c in entries])[:, None, None])

    class ERA5Pairs(Dataset):
        def __init__(self):
            # Opened in each worker, never here: zarr-python's event-loop thread, once started
            # in this process, does not survive the fork into the DataLoader's workers (they
            # hang). The length comes from the store's metadata.
            self.ds = None
            self.steps = int(zarrpipe.info(args.store)["dims"]["time"])

        def __len__(self) -> int:
            return self.steps - 1

        def fields(self, t: int) -> np.ndarray:
            if self.ds is None:
                self.ds = xr.open_zarr(args.store, consolidated=False, chunks=None)[args.variables]
            step = self.ds.isel(time=t).load()
            # A level variable gives a channel per level, as in zarrpipe's stacking.
            fields = [(step[v].values.reshape(-1, *step[v].shape[-2:]) - stats[v][0]) / stats[v][1]
                      for v in args.variables]
            return np.concatenate(fields).astype(np.float32)

        def __getitem__(self, t: int):
            return torch.from_numpy(self.fields(t)), torch.from_numpy(self.fields(t + 1))

    data = ERA5Pairs()
    sampler = DistributedSampler(data, seed=0, drop_last=True) if args.distributed else None
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=sampler is None,
                        sampler=sampler, num_workers=args.workers,
                        pin_memory=device.type == "cuda", drop_last=True,
                        persistent_workers=args.workers > 0,
                        prefetch_factor=4 if args.workers > 0 else None)
    if len(loader) == 0:
        raise SystemExit(f"{len(data)} samples per epoch: not one batch of {args.batch_size} "
                         f"(a larger store, or a smaller --batch-size)")
    epoch = 0
    while True:
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in loader:
            yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        epoch += 1


# --- 3. The training loop, timed on the GPU's timeline ---------------------------------------


def main() -> int:
    args = parse_args()
    device, rank, world = setup_device(args)
    if args.loader != "synthetic":
        args.statistics = load_statistics(args)
        args.normalize = args.statistics
    channels = count_channels(args)
    shape = field_shape(args)

    torch.manual_seed(0)
    model = UNet(channels, channels).to(device)
    if args.precision == "bf16":
        model = model.to(memory_format=torch.channels_last)
    if args.distributed:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")

    zarrpipe_loader = None
    if args.loader == "synthetic":
        batches = synthetic_batches(args, channels, shape, device)
    elif args.loader == "zarrpipe":
        zarrpipe_loader = ZarrpipeBatches(args, device)
        batches = iter(zarrpipe_loader)
    elif args.loader == "dali":
        import hackathon_dali

        batches = hackathon_dali.batches(args, device)
    else:
        batches = baseline_batches(args, device)

    cuda = device.type == "cuda"
    steps = args.warmup + args.steps
    ends, readies = [], []  # CUDA events: a step's end, the next batch there for the model
    host_ends = []  # the same ends on the host's clock, where there is no GPU
    host_wait = 0.0
    loss_sum = torch.zeros((), device=device)
    losses = []
    started = metrics_at_start = None
    model.train()
    for step in range(steps):
        if step == args.warmup:
            sync(device)
            started = time.perf_counter()
            # On the same clock as zarrpipe's traces (ZARRPIPE_LOG), to find what ran when.
            print(f"rank {rank}: timed steps from {datetime.now(timezone.utc).isoformat()}",
                  file=sys.stderr, flush=True)
            metrics_at_start = zarrpipe_loader.metrics() if zarrpipe_loader else None
            loss_sum.zero_()
        timed = step >= args.warmup
        waiting = time.perf_counter()
        x, y = next(batches)
        if timed:
            host_wait += time.perf_counter() - waiting
        if args.precision == "bf16":
            x = x.contiguous(memory_format=torch.channels_last)
        if cuda and timed:
            ready = torch.cuda.Event(enable_timing=True)
            ready.record()
            readies.append(ready)
        if args.no_training:
            loss = x.float().mean() + y.float().mean()  # touches the batch, nothing more
        else:
            with autocast:
                loss = F.mse_loss(model(x).float(), y.float())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        if timed:
            loss_sum += loss.detach()
            if cuda:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                ends.append(end)
            else:
                host_ends.append(time.perf_counter())
        if (step + 1) % args.log_every == 0:
            losses.append(loss.item())
            if rank == 0:
                print(f"step {step + 1:5d}  loss {losses[-1]:.4f}", flush=True)
    sync(device)
    seconds = time.perf_counter() - started

    # Data wait on the GPU's timeline: end of step i -> batch i+1 there (the first timed
    # batch waits from the last warm-up step, which has no event: left out).
    if cuda:
        data_wait = sum(end.elapsed_time(ready) for end, ready in zip(ends, readies[1:])) / 1e3
    else:
        data_wait = host_wait
    samples = args.steps * args.batch_size * world
    # The last half of the timed steps: from the end of the step before it to the last end.
    half = args.steps // 2
    if cuda:
        last_half = ends[half - 1].elapsed_time(ends[-1]) / 1e3 if half else 0.0
    else:
        last_half = host_ends[-1] - host_ends[half - 1] if half else 0.0
    last_half_rate = (args.steps - half) * args.batch_size * world / last_half if last_half else None
    name = args.loader
    if args.loader == "zarrpipe":
        name = f"zarrpipe-{args.mode}" if cuda else "zarrpipe-cpu"
    if args.loader == "dali" and not (cuda and args.dali_zarr_gpu):
        name = "dali-zarr-cpu"
    result = dict(loader=name,
                  training=not args.no_training, precision=args.precision,
                  store=args.store, variables=len(args.variables), shape=list(shape),
                  batch_size=args.batch_size, steps=args.steps, warmup=args.warmup,
                  world_size=world, device=str(device), seconds=seconds,
                  samples_per_s=samples / seconds,
                  samples_per_s_last_half=last_half_rate,
                  data_wait_fraction=min(data_wait / seconds, 1.0),
                  host_wait_fraction=min(host_wait / seconds, 1.0),
                  mean_loss=float(loss_sum.item()) / args.steps,
                  input_gb_per_s=samples * 2 * channels * shape[0] * shape[1] * 4 / seconds / 1e9)
    if cuda:
        # The device's memory in use at the end (model, optimizer, activations, and the
        # loader's), and the most PyTorch itself held: what the loader left the model.
        free, total = torch.cuda.mem_get_info(device)
        result.update(device_memory_used_gib=(total - free) / 2**30,
                      torch_max_allocated_gib=torch.cuda.max_memory_allocated(device) / 2**30,
                      model_stream=args.model_stream)
    if zarrpipe_loader is not None:
        now = zarrpipe_loader.metrics()
        delta = {k: now.get(k, 0) - metrics_at_start.get(k, 0) for k in now}
        result.update(loader_gpu_fraction=delta.get("gpu_busy_s", 0.0) / seconds,
                      gpu_decoded_chunks=delta.get("gpu_decoded_chunks", 0),
                      cpu_decoded_chunks=delta.get("cpu_decoded_chunks", 0),
                      loader_consumer_wait_fraction=delta.get("consumer_wait_s", 0.0) / seconds)
    if args.distributed:
        # A rank's wait holds every rank in the next all-reduce: each rank's, beside rank 0's.
        mine = {"data_wait_by_rank": result["data_wait_fraction"],
                "host_wait_by_rank": result["host_wait_fraction"],
                "cpu_chunks_by_rank": result.get("cpu_decoded_chunks", 0),
                "gpu_chunks_by_rank": result.get("gpu_decoded_chunks", 0)}
        every = [None] * world
        torch.distributed.all_gather_object(every, mine)
        result.update({key: [ranks[key] for ranks in every] for key in mine})
    if rank == 0:
        print(f"{result['loader']}{' (loader alone)' if args.no_training else ''}, "
              f"{args.precision}: {result['samples_per_s']:.1f} samples/s"
              + (f" ({last_half_rate:.1f} over the last half)" if last_half_rate else "")
              + ", data wait "
              f"{100 * result['data_wait_fraction']:.1f}% of the time"
              + (f", loader GPU time {100 * result['loader_gpu_fraction']:.1f}%"
                 if "loader_gpu_fraction" in result else "")
              + f", mean loss {result['mean_loss']:.4f}")
        print(json.dumps(result), flush=True)
    ok = check_loss(args, losses, result)
    if args.distributed:
        torch.distributed.destroy_process_group()
    os._exit(0 if ok else 1)  # DataLoader workers and pipelines need no orderly teardown


def check_loss(args, losses: list[float], result: dict) -> bool:
    """With --tiny: the loss must be finite and fall (first logged value vs the last)."""
    finite = all(v == v and abs(v) != float("inf") for v in losses + [result["mean_loss"]])
    if not finite:
        print("the loss is not finite", file=sys.stderr)
        return False
    learnable = args.loader != "synthetic"  # random targets: nothing to learn
    if args.tiny and learnable and not args.no_training and not (
            len(losses) >= 2 and losses[-1] < losses[0]):
        print(f"the loss did not fall: {losses}", file=sys.stderr)
        return False
    return True


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- 4. Options ------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("store", nargs="?", help="the Zarr store (not needed for synthetic)")
    p.add_argument("--loader", choices=["synthetic", "zarrpipe", "baseline", "dali"], default="zarrpipe")
    p.add_argument("--mode", choices=["gpu", "cpu", "split", "auto"], default="gpu",
                   help="zarrpipe on a GPU: where chunks are decoded (cpu: CPU decode, GPU collate)")
    p.add_argument("--gpu-share", type=float, help="zarrpipe auto: the GPU time it may take")
    p.add_argument("--gpu-chunks", type=float,
                   help="zarrpipe split: a fixed fraction of each batch's chunks on the GPU")
    p.add_argument("--cpu-decode-threads", type=int,
                   help="zarrpipe on a GPU: threads decoding on the CPU (cpu, split, auto)")
    p.add_argument("--gpu-read-memory", type=float,
                   help="zarrpipe on a GPU: GiB of pinned memory that chunk reads land in")
    p.add_argument("--variables", default=",".join(SETUP_A),
                   help="comma-separated, or 'all' (every data variable, levels as channels)")
    p.add_argument("--stats", help="per-channel mean and std (zarrpipe stats --json); "
                                   "default: computed (and cached beside the store)")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=100, help="timed steps (the same for every loader)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--no-training", action="store_true", help="time the loader alone")
    p.add_argument("--workers", type=int, default=8, help="baseline: DataLoader workers")
    p.add_argument("--dali-zarr-gpu", action=argparse.BooleanOptionalAction, default=True,
                   help="dali: zarr-python into CuPy buffers (enable_gpu), as the hackathon ran it")
    p.add_argument("--prefetch", type=int, default=4, help="zarrpipe: batches loaded ahead")
    p.add_argument("--shape", help="synthetic: LAT,LON (default 640,1280 or the store's)")
    p.add_argument("--device", help="cuda:N or cpu (default: cuda:LOCAL_RANK when there is a GPU)")
    p.add_argument("--distributed", action="store_true", help="under torchrun: DDP, a pipeline per rank")
    p.add_argument("--dist-backend", choices=["nccl", "gloo"],
                   help="default: nccl on GPUs, gloo on the CPU (gloo lets ranks share one GPU)")
    p.add_argument("--model-stream", choices=["default", "high"], default="default",
                   help="on a GPU: the stream the model runs on (high: the device's highest "
                        "priority, its kernels scheduled ahead of decoding on other streams)")
    p.add_argument("--tiny", action="store_true",
                   help="a few steps on a small grid; the loss must fall (a smoke test)")
    args = p.parse_args()
    if args.loader != "synthetic" and not args.store:
        p.error(f"--loader {args.loader} needs a store")
    if args.tiny:
        args.batch_size, args.steps, args.warmup, args.log_every = 2, 12, 2, 4
    args.variables = resolve_variables(args)
    return args


def resolve_variables(args) -> list[str]:
    if args.variables != "all":
        return [v for v in args.variables.split(",") if v]
    if not args.store:
        return SETUP_A
    import zarrpipe

    return [v["name"] for v in zarrpipe.info(args.store)["variables"] if not v["coordinate"]]


def count_channels(args) -> int:
    """Channels of the stacked variables: one per variable, one per level of a level variable
    (what zarrpipe stacks, and the baseline too)."""
    if not args.store:
        return len(args.variables)
    import zarrpipe

    shapes = {v["name"]: dict(zip(v["dims"], v["shape"]))
              for v in zarrpipe.info(args.store)["variables"]}
    count = 0
    for name in args.variables:
        extra = [n for d, n in shapes[name].items() if d not in ("time", "latitude", "longitude")]
        count += int(torch.tensor(extra).prod()) if extra else 1
    return count


def setup_device(args):
    rank, world = 0, 1
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if args.device:
        device = torch.device(args.device)
    elif torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
        if args.model_stream == "high":
            # zarrpipe hands each batch over on the consumer's current stream (DLPack), so
            # the batches follow the model onto this one.
            torch.cuda.set_stream(torch.cuda.Stream(device, priority=-100))
    elif args.model_stream != "default":
        raise SystemExit(f"--model-stream {args.model_stream} needs a CUDA device, not {device}")
    if args.distributed:
        # NCCL refuses two ranks on one GPU: gloo for that test (--dist-backend gloo).
        backend = args.dist_backend or ("nccl" if device.type == "cuda" else "gloo")
        # NVLink multicast off: the lent multi-GPU hosts are shared (a user's setting wins).
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        torch.distributed.init_process_group(backend)
        rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    return device, rank, world


def field_shape(args) -> tuple[int, int]:
    if args.shape:
        lat, lon = (int(v) for v in args.shape.split(","))
        return lat, lon
    if args.store:
        import zarrpipe

        dims = zarrpipe.info(args.store)["dims"]
        return int(dims["latitude"]), int(dims["longitude"])
    return (64, 128) if args.tiny else (640, 1280)


def load_statistics(args) -> dict:
    """Per-channel mean and std (what `zarrpipe stats --json` writes): --stats, or computed
    once with zarrpipe.stats (every chunk read) and kept in a file beside the store."""
    if args.stats:
        with open(args.stats) as f:
            return json.load(f)
    import zarrpipe

    cache = os.path.join(os.path.dirname(os.path.abspath(args.store)),
                         os.path.basename(os.path.abspath(args.store)) + ".stats.json")
    if os.path.exists(cache):
        with open(cache) as f:
            report = json.load(f)
        if set(args.variables) <= set(report["computed_over"]["variables"]):
            return report
    report = zarrpipe.stats(args.store, args.variables)
    try:
        with open(cache, "w") as f:
            json.dump(report, f)
    except OSError:
        pass  # a read-only place: computed again next time
    return report


if __name__ == "__main__":
    sys.exit(main())
