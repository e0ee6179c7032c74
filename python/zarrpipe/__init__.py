"""zarrpipe: training batches straight from Zarr, as PyTorch tensors without a copy.

A :class:`Pipeline` opens a Zarr v2/v3 dataset (local, ``http(s)://``, ``s3://``, ``gs://``,
``az://``), cuts xbatcher-style windows, reads and decodes chunks on every core (or on the GPU),
and yields :class:`Batch` es of ``[batch, channel, window...]`` tensors. It behaves like a
PyTorch data loader: ``len()``, ``set_epoch()``, ``state_dict()`` / ``load_state_dict()``,
ranks from ``torch.distributed``.

    >>> import zarrpipe
    >>> pipe = zarrpipe.Pipeline("data/sample.zarr", variables=["t2m", "z"],
    ...                          input_dims={"latitude": 64, "longitude": 64}, batch_size=8)
    >>> for batch in pipe:
    ...     batch.inputs.shape   # torch.Size([8, 14, 64, 64]) (numpy without torch)

Everything runs in Rust (the ``zarrpipe`` crates); the GIL is released while it works.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from . import _native
from ._native import (
    CollateError,
    DecodeError,
    GpuError,
    LayoutError,
    StoreError,
    ZarrpipeError,
)

__version__: str = _native.__version__

__all__ = [
    "Batch",
    "CollateError",
    "DecodeError",
    "GpuError",
    "LayoutError",
    "Pipeline",
    "StoreError",
    "ZarrpipeError",
    "advise",
    "cuda_available",
    "info",
    "rechunk",
    "sample_dataset",
    "stats",
]

_TORCH: Any = None


def _torch() -> Any:
    """torch if it is installed (imported once), else None."""
    global _TORCH
    if _TORCH is None:
        try:
            import torch
        except ImportError:
            _TORCH = False
        else:
            _TORCH = torch
    return _TORCH or None


def cuda_available() -> bool:
    """Whether this build of zarrpipe has the GPU path (it still needs a GPU to run)."""
    return bool(_native.cuda_built())


def _store_pairs(store_options: Mapping[str, Any] | None) -> list[tuple[str, str]] | None:
    if store_options is None:
        return None
    return [(str(key), _option_text(value)) for key, value in store_options.items()]


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def info(url: str | os.PathLike[str], *, store_options: Mapping[str, Any] | None = None,
         mask_and_scale: bool = True, time_dim: str | None = None) -> dict:
    """What ``zarrpipe info URL --json`` prints: variables with their dims, shapes, dtypes,
    chunks, codecs, sizes and CF encoding, the dataset's dims and attributes, and the
    dimension iterated as time with the reason (``time_dim`` names it instead)."""
    return json.loads(_native.info_json(os.fspath(url), _store_pairs(store_options),
                                        mask_and_scale, time_dim))


def stats(
    url: str | os.PathLike[str],
    variables: Sequence[str] | None = None,
    *,
    start: Any = None,
    end: Any = None,
    dim: str | None = None,
    store_options: Mapping[str, Any] | None = None,
    mask_and_scale: bool = True,
    time_dim: str | None = None,
) -> dict:
    """Training statistics, what ``zarrpipe stats URL --json`` prints and what
    ``Pipeline(normalize=...)`` takes: per channel (``"z[level=3]"``) the count, NaN count, mean,
    standard deviation, min and max of the values and of their tendencies (differences between
    consecutive steps), over the steps of ``dim`` (default: the time dimension) from
    ``start`` to ``end`` (dates or coordinate values, ends included; default: all), in one
    streaming pass, of the values xarray decodes (``mask_and_scale=False``: stored values).
    Missing steps are left out. ``"computed_over"`` records the store, variables, range and time; ``"variables"``
    pools each variable's channels."""
    names = list(variables) if variables is not None else None
    return json.loads(_native.stats_json(
        os.fspath(url), names, _store_pairs(store_options),
        None if start is None else _coordinate_text(start),
        None if end is None else _coordinate_text(end), dim, mask_and_scale, time_dim))


def rechunk(
    source: str | os.PathLike[str],
    destination: str | os.PathLike[str],
    chunks: Mapping[str, int],
    *,
    shards: Mapping[str, int] | None = None,
    codec: str = "zstd:3",
    variables: Sequence[str] | None = None,
    store_options: Mapping[str, Any] | None = None,
) -> dict:
    """Rewrites ``source`` as a Zarr v3 store at ``destination`` with new chunks, shards and
    codec, as ``zarrpipe rechunk`` does (resumable: call again after an interruption).
    ``chunks={"time": 1, "latitude": 320, "longitude": 640}``, ``shards={"latitude": 640}``,
    codec ``zstd[:LEVEL]``, ``blosc-lz4[:CLEVEL]``, ``blosc-zstd[:CLEVEL]``, ``gzip[:LEVEL]`` or
    ``none``. Returns the counts of arrays, chunks, and chunks written by this call."""
    arrays, total, written = _native.rechunk(
        os.fspath(source), os.fspath(destination), dict(chunks), dict(shards or {}), codec,
        list(variables or []), _store_pairs(store_options),
    )
    return {"arrays": arrays, "chunks": total, "written": written}


def advise(
    url: str | os.PathLike[str],
    variable: str | None = None,
    *,
    sample_bytes: int = 64 << 20,
    store_options: Mapping[str, Any] | None = None,
) -> dict:
    """Which layout feeds this machine fastest: ``zarrpipe advise URL --json`` (the store's and
    each candidate layout's read and decode figures, ``best`` and ``reason``), and where to
    decode it beside a model training on the GPU (``decode_on``: ``"cpu"`` or ``"auto"``, the
    value for ``Pipeline(decode_on=...)``, and ``decode_on_reason``)."""
    return json.loads(_native.advise_json(os.fspath(url), variable, sample_bytes, _store_pairs(store_options)))


def sample_dataset() -> str:
    """Writes zarrpipe's sample dataset (ERA5-like: ``t2m``, ``u10``, ``z`` on 13 levels, 128 x
    256 points, zstd) to ``data/sample.zarr`` under the working directory unless it is already
    there, and returns that path. The examples run on it."""
    return _native.sample_dataset()


@dataclass
class Batch:
    """One batch. Tensors are torch tensors when torch is installed (``tensors="auto"``),
    else NumPy arrays (CPU) or :class:`CudaTensor` s (GPU, for ``cupy.from_dlpack`` and the
    like); either way they hold zarrpipe's own memory, without a copy.

    ``inputs``: ``[batch, channel, window...]`` (channels as :attr:`Pipeline.channels`).
    ``targets``: with ``leads``, ``[batch, leads x channels, window...]``.
    ``mask``: with ``edge="pad"``, ``[batch, window...]`` uint8, 1 where ``inputs`` holds data.
    ``nan_mask``: with ``nan_mask=True``, the inputs' shape, uint8, 0 where the value was NaN.
    ``latitude_weights``: with ``latitude_weights=DIM``, ``[batch, latitude window]``.
    """

    inputs: Any
    targets: Any = None
    mask: Any = None
    nan_mask: Any = None
    latitude_weights: Any = None
    #: The batch's number in its epoch.
    index: int = 0
    #: The epoch it belongs to.
    epoch: int = 0
    #: ``(sample number, origin)`` per sample: the sample's index in the whole epoch's
    #: natural order and the start of its window along each sample dimension.
    samples: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)
    #: GPU batches: the device address of each tensor as zarrpipe allocated it.
    device_pointers: dict[str, int] = field(default_factory=dict)

    @property
    def sample_indices(self) -> list[int]:
        """The samples' numbers (``samples[i][0]``)."""
        return [index for index, _ in self.samples]

    def __len__(self) -> int:
        return len(self.samples)


_TENSORS = ("inputs", "targets", "mask", "nan_mask", "latitude_weights")


def _device_text(device: Any) -> str:
    text = str(device)
    if text == "cuda":
        torch = _torch()
        index = torch.cuda.current_device() if torch is not None and torch.cuda.is_available() else 0
        return f"cuda:{index}"
    return text


def _dtype_text(dtype: Any) -> str | None:
    if dtype is None:
        return None
    text = str(dtype).removeprefix("torch.")
    aliases = {"float": "float32", "half": "float16", "bf16": "bfloat16", "f32": "float32",
               "f16": "float16", "<f4": "float32"}
    return aliases.get(text, text)


def _coordinate_text(value: Any) -> str:
    """A selection bound as the Rust side reads it: a number, or a date/time string."""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _normalize_json(normalize: Any, url: str, variables: Sequence[str] | None,
                    store_options: Mapping[str, Any] | None, mask_and_scale: bool,
                    time_dim: str | None) -> str | None:
    if normalize is None or normalize is False:
        return None
    if normalize is True:
        if variables is not None:
            # Statistics of the stored variables: derived channels are computed, not stored
            # (and, without an entry of their own, delivered as computed).
            described = info(url, store_options=store_options,
                             mask_and_scale=mask_and_scale, time_dim=time_dim)["variables"]
            stored = {variable["name"] for variable in described}
            variables = [name for name in variables if name in stored]
        return json.dumps(stats(url, variables, store_options=store_options,
                                mask_and_scale=mask_and_scale, time_dim=time_dim))
    if isinstance(normalize, os.PathLike) or (
        isinstance(normalize, str) and not normalize.lstrip().startswith(("[", "{"))
    ):
        with open(normalize, encoding="utf-8") as file:
            return file.read()
    if isinstance(normalize, str):
        return normalize
    if isinstance(normalize, Mapping):
        return json.dumps(dict(normalize))
    return json.dumps(list(normalize))


def _distributed_ranks() -> tuple[int, int] | None:
    torch = _torch()
    if torch is None:
        return None
    distributed = getattr(torch, "distributed", None)
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        return distributed.get_rank(), distributed.get_world_size()
    return None


def _processes_on_host() -> int | None:
    """Under ``torchrun``, the ranks on this host (``LOCAL_WORLD_SIZE``): the Rust builder's
    ``processes_on_host``, so that a GPU pipeline's CPU decoding takes its rank's share of the
    host's cores (two ranks that each took every core would decode with twice as many threads
    as there are cores, beside two training loops). None for a single process."""
    try:
        ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        return None
    return ranks_here if ranks_here > 1 else None


def _rank_on_host() -> int | None:
    """Under ``torchrun`` with several ranks on this host, this rank's ``LOCAL_RANK``: the
    Rust builder's ``rank_on_host``, so that its CPU decoding keeps to its own run of the
    host's cores instead of crowding the other ranks' (decode threads pinned to the rank's
    share). None for a single process, or where ``LOCAL_RANK`` is not a count."""
    if _processes_on_host() is None:
        return None
    try:
        rank = int(os.environ.get("LOCAL_RANK", ""))
    except ValueError:
        return None
    return rank if rank >= 0 else None


def _waits_shared_by() -> str | None:
    """Under ``torchrun`` with several ranks on this host, the name the host's ranks share
    their waits under (the Rust builder's ``share_waits_on_host``): the launcher's process id,
    the parent of every rank on the host, and its restart count. A rank that waits for its
    batch holds the others up at the next all-reduce, where they count the time as their
    model's work: shared, ``auto`` in every rank sees it. None for a single process."""
    if _rank_on_host() is None:
        return None
    restarts = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if not restarts.isdigit():
        restarts = "0"
    return f"torchrun-{os.getppid()}-{restarts}"


def _find_cuda_libraries() -> None:
    """Before a GPU pipeline: zarrpipe loads NVRTC and nvCOMP 6 at run time. Where the system
    has no NVRTC on the library path, take the one pip's nvidia wheels bring (torch depends on
    them), and where ``NVCOMP_LIB`` is unset, an installed ``nvidia-libnvcomp`` wheel's."""
    import ctypes
    import glob
    import site

    bases = [*site.getsitepackages(), site.getusersitepackages()]

    def find(name: str) -> str | None:
        for base in bases:
            for folder in ("lib", "lib64"):
                hits = sorted(glob.glob(os.path.join(base, "nvidia", "*", folder, name)))
                if hits:
                    return hits[-1]
        return None

    try:
        ctypes.CDLL("libnvrtc.so")
    except OSError:
        nvrtc = find("libnvrtc.so.1[0-9]")
        if nvrtc is not None:
            # Loaded once, globally: zarrpipe's dlopen of `libnvrtc.so.<major>` finds it.
            ctypes.CDLL(nvrtc, mode=ctypes.RTLD_GLOBAL)
    if "NVCOMP_LIB" not in os.environ:
        nvcomp = find("libnvcomp.so.6")
        if nvcomp is not None:
            os.environ["NVCOMP_LIB"] = nvcomp


class Pipeline:
    """An iterable of :class:`Batch` es over a Zarr dataset, one epoch per ``iter()``.

    The options are the Rust builder's (``zarrpipe_pipeline::PipelineBuilder``) under the
    same names, windows in xbatcher's terms:

    - ``variables``: stacked as channels in this order (default: every data variable). Every
      dimension that is neither iterated nor windowed is stacked too (``z`` with 13 levels
      gives 13 channels). A variable without time (``lsm``) is a static field, read once; a
      name that is no variable but a derived channel (``cos_lat``, ``cos_zenith``, ...; see
      the README) is computed on each sample's grid and time.
    - ``input_dims`` / ``input_overlap``: ``{dim: size}`` / ``{dim: overlap}``; stride = size -
      overlap. ``time`` is iterated (one sample per step) unless windowed. ``batch_dims`` and
      ``concat_input_dims`` as xbatcher's. ``edge``: ``"drop"`` windows that would cross the
      end, ``"pad"`` them (batches carry a ``mask``) or ``"shift"`` them back.
    - ``select``: ``{dim: (from, to)}`` coordinate ranges (dates or numbers), ends included;
      ``{dim: [v, ...]}`` (a list, or one value) the channels of a dimension stacked as
      channels at those coordinate values, in that order (``{"level": [500, 850]}``; variables
      without the dimension keep theirs). Channels are named by value: ``"z[level=500]"``.
    - ``history`` / ``leads``: forecasting pairs, ``history`` input steps and targets ``leads``
      steps ahead.
    - ``batch_size``, ``drop_last``; ``shuffle`` (False, True or ``"full"``, ``"blocks"``),
      ``seed``, ``epoch`` (or :meth:`set_epoch`); ``rank`` / ``world_size`` (default:
      ``torch.distributed`` when initialised, else ``RANK`` / ``WORLD_SIZE``), ``uneven``.
    - ``missing``: samples whose inputs or targets touch a missing time step (one the time
      coordinate leaves out of its regular frequency, or one whose whole field is absent):
      ``"skip"`` (default) leaves them out, ``"fill"`` keeps them (NaN for left-out steps,
      the fill value for absent data), ``"error"`` raises naming the dates, ``"ignore"`` does
      not look for them (no coordinate read or store listing when the pipeline is made).
    - ``normalize``: per-channel ``mean`` and ``std``: a path to ``zarrpipe stats --json``
      output, that JSON, the dict :func:`stats` returns (or an earlier version's list of
      per-variable entries), or True to compute it now (reads every chunk). Then
      ``nan_fill``, ``nan_mask``, ``latitude_weights`` (a dim name).
    - ``device``: ``"cpu"`` or ``"cuda:N"`` (batches collated in that GPU's memory; needs a
      build with the ``cuda`` feature), ``decode_on``: ``"gpu"`` (default there), ``"cpu"``,
      ``"split"`` (both, by their measured rates, the CPU only while it adds to what the GPU
      decodes alone; with ``gpu_chunks``, that fixed fraction of each batch's chunks on the
      GPU and the rest on the CPU) or ``"auto"`` (the GPU only while training
      waits, at most ``gpu_share`` of its time; the wait is read on the GPU, from when the loop
      asks for a batch to when the batch is there for its stream); ``cpu_decode_threads``: threads decoding on
      the CPU there, at a low priority so the training loop keeps its cores (default: every
      core but two; a quarter of them for ``"split"``; under ``torchrun``, the host's cores
      are first shared among its ``LOCAL_WORLD_SIZE`` ranks, each rank's threads kept to a
      run of neighbouring cores of its own by its ``LOCAL_RANK``).
      ``dtype``: float32 (CPU), or float32, bfloat16, float16 on the GPU (a ``torch.dtype`` or
      its name). ``gpu_memory``: bytes of the GPU's memory the loader takes at most, half for
      decoding (decoded chunks not yet collated, stored bytes being decoded), half for batch
      tensors (default: a quarter of the device's memory, leaving the model the rest; under
      it fewer batches decode at once). ``gpu_tensor_memory`` / ``gpu_pinned_memory``: bytes
      of batch tensors on the device (overrides ``gpu_memory``'s half) / of stored chunks
      staged in pinned memory at once; ``gpu_read_memory``: bytes
      of pinned memory that chunk reads of a local store land in, so they upload unstaged
      (default 16 GiB, at most a quarter of the host's memory; 0: none; what the loader
      will hold is allocated ahead, in the background, from when it is built; under
      ``decode_on="auto"``, from when the GPU first takes a part). ``gpu_decode_streams``: most
      batches decoding on the GPU at once (default 6; batches of many chunks decode 3 at a
      time): each holds its decoded output and nvCOMP's scratch memory in device memory, so
      fewer leave more to the model (W1 of 64 steps on the H100: 21.0 GiB at 6, 12.3 at 3).
    - ``prefetch``: batches loaded ahead, ready to be taken; ``read_ahead``: batches whose
      chunks are read ahead of decoding; ``fetch_concurrency``: chunk reads in flight at
      once (the oldest batch's first). ``epochs_in_a_row`` (default True): a loop that calls
      :meth:`set_epoch` before each epoch (as with ``DistributedSampler``) gets one stream for
      its epochs: an epoch started after ``set_epoch(n)`` goes on loading epoch ``n + 1``'s
      first batches while its own last are trained on, and the next ``iter()`` takes them
      when it runs epoch ``n + 1`` with nothing loaded by :meth:`load_state_dict` (otherwise
      they are dropped). Between epochs the pipeline then holds up to ``prefetch`` batches of
      the next one. An ``iter()`` without ``set_epoch`` before it (a validation loop
      repeating its epoch), or False, starts and ends its epoch alone. Store access: ``store_options`` (``{"anonymous":
      True, "endpoint": ...}``), ``cache_dir`` / ``cache_size`` (bytes), ``max_requests``,
      ``timeout`` (seconds), ``retries``.
    - Values: ``mask_and_scale`` (default True) decodes CF packing and missing values as
      ``xr.open_zarr`` does (``scale_factor``, ``add_offset``, ``_FillValue``,
      ``missing_value``, ``_Unsigned``); False gives the stored values. ``time_dim`` names the
      dimension iterated as time (default: found by its coordinates: ``axis: T``,
      ``standard_name: time``, date units, then the names ``time``, ``valid_time``, ``date``).
    - ``tensors``: ``"auto"`` (torch tensors if torch is installed), ``"torch"`` or ``"raw"``
      (NumPy arrays on the CPU, :class:`CudaTensor` s on the GPU).

    Bad options and unreadable datasets raise :class:`ZarrpipeError` subclasses (or
    ValueError / TypeError for malformed arguments) here, not at the first batch.
    """

    def __init__(
        self,
        url: str | os.PathLike[str],
        *,
        variables: Sequence[str] | None = None,
        input_dims: Mapping[str, int] | None = None,
        input_overlap: Mapping[str, int] | None = None,
        batch_dims: Mapping[str, int] | None = None,
        concat_input_dims: bool = False,
        batch_size: int = 4,
        shuffle: bool | str = False,
        seed: int = 0,
        epoch: int = 0,
        history: int | None = None,
        leads: Sequence[int] | int | None = None,
        edge: str = "drop",
        missing: str = "skip",
        select: Mapping[str, tuple[Any, Any] | list[Any] | Any] | None = None,
        normalize: Any = None,
        nan_fill: float | None = None,
        nan_mask: bool = False,
        latitude_weights: str | None = None,
        dtype: Any = None,
        device: Any = "cpu",
        prefetch: int = 4,
        read_ahead: int = 2,
        epochs_in_a_row: bool = True,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        uneven: str = "pad",
        store_options: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_size: int | None = None,
        max_requests: int | None = None,
        timeout: float | None = None,
        retries: int | None = None,
        fetch_concurrency: int | None = None,
        cpu_decode_threads: int | None = None,
        gpu_memory: int | None = None,
        gpu_tensor_memory: int | None = None,
        gpu_pinned_memory: int | None = None,
        gpu_read_memory: int | None = None,
        gpu_decode_streams: int | None = None,
        decode_on: str | None = None,
        gpu_share: float | None = None,
        gpu_chunks: float | None = None,
        mask_and_scale: bool = True,
        time_dim: str | None = None,
        tensors: str = "auto",
    ) -> None:
        url = os.fspath(url)
        if tensors not in ("auto", "torch", "raw"):
            raise ValueError(f'tensors must be "auto", "torch" or "raw", not {tensors!r}')
        if tensors == "torch" and _torch() is None:
            raise ImportError('tensors="torch" needs torch installed')
        if (rank is None) != (world_size is None):
            raise ValueError("give both `rank` and `world_size`, or neither")
        if rank is None:
            ranks = _distributed_ranks()
            if ranks is not None:
                rank, world_size = ranks
        device = _device_text(device)
        if device.startswith("cuda"):
            _find_cuda_libraries()
        if decode_on is not None and decode_on != "cpu" and not device.startswith("cuda"):
            raise ValueError(f'decode_on={decode_on!r} needs device="cuda:N"')
        if isinstance(shuffle, bool):
            shuffle = "full" if shuffle else "none"
        if isinstance(leads, int):
            leads = [leads]
        variables = list(variables) if variables is not None else None
        options = {
            "variables": variables,
            "input_dims": list((input_dims or {}).items()),
            "input_overlap": list((input_overlap or {}).items()),
            "batch_dims": list((batch_dims or {}).items()),
            "concat_input_dims": concat_input_dims,
            "batch_size": batch_size,
            "shuffle": shuffle,
            "seed": seed,
            "history": history,
            "leads": list(leads) if leads is not None else None,
            "edge": edge,
            "missing": missing,
            "select": [
                (dim, _coordinate_text(picked[0]), _coordinate_text(picked[1]))
                for dim, picked in (select or {}).items() if isinstance(picked, tuple)
            ],
            "select_channels": [
                (dim, [_coordinate_text(value) for value in
                       (picked if isinstance(picked, list) else [picked])])
                for dim, picked in (select or {}).items() if not isinstance(picked, tuple)
            ],
            "normalize": _normalize_json(normalize, url, variables, store_options,
                                         mask_and_scale, time_dim),
            "nan_fill": nan_fill,
            "nan_mask": nan_mask,
            "latitude_weights": latitude_weights,
            "dtype": _dtype_text(dtype),
            "device": device,
            "prefetch": prefetch,
            "read_ahead": read_ahead,
            "epochs_in_a_row": epochs_in_a_row,
            "drop_last": drop_last,
            "rank": rank,
            "world_size": world_size,
            "uneven": uneven,
            "store_options": _store_pairs(store_options),
            "cache_dir": os.fspath(cache_dir) if cache_dir is not None else None,
            "cache_size": cache_size,
            "max_requests": max_requests,
            "timeout": timeout,
            "retries": retries,
            "fetch_concurrency": fetch_concurrency,
            "cpu_decode_threads": cpu_decode_threads,
            "processes_on_host": _processes_on_host(),
            "rank_on_host": _rank_on_host(),
            "waits_shared_by": _waits_shared_by(),
            "gpu_memory": gpu_memory,
            "gpu_tensor_memory": gpu_tensor_memory,
            "gpu_pinned_memory": gpu_pinned_memory,
            "gpu_read_memory": gpu_read_memory,
            "gpu_decode_streams": gpu_decode_streams,
            "decode_on": decode_on,
            "gpu_share": gpu_share,
            "gpu_chunks": gpu_chunks,
            "mask_and_scale": mask_and_scale,
            "time_dim": time_dim,
        }
        self._native = _native.NativePipeline(url, options)
        self._pid = os.getpid()
        self._tensors = tensors
        self._epoch = int(epoch)
        self._resume: str | None = None
        # set_epoch was called for the next iteration: the loop walks epochs.
        self._walking = False
        self._current: Any = None
        self._last_state: str | None = None
        self._last_metrics: dict[str, Any] | None = None
        self._last_epoch = self._epoch

    # --- what a DataLoader has ---------------------------------------------------------

    def __len__(self) -> int:
        """Batches per epoch for this rank."""
        return len(self._native)

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch`` for the next iteration (its shuffle is seeded with
        ``seed + epoch``), as ``DistributedSampler.set_epoch``. A state loaded with
        :meth:`load_state_dict` applies to its own epoch only: another epoch starts afresh.
        With ``epochs_in_a_row``, that iteration also loads the next epoch's first batches as
        it ends."""
        epoch = int(epoch)
        if epoch != self._epoch:
            self._resume = None
        self._epoch = epoch
        self._walking = True

    @property
    def epoch(self) -> int:
        """The epoch the next iteration runs."""
        return self._epoch

    def __iter__(self) -> Iterator[Batch]:
        if os.getpid() != self._pid:
            raise RuntimeError(
                "this zarrpipe.Pipeline was made in another process (a forked DataLoader worker?): "
                "its Rust threads are not here. Iterate it directly; it is parallel already."
            )
        epoch, resume, walking = self._epoch, self._resume, self._walking
        self._resume, self._walking = None, False
        native_epoch = self._native.epoch(epoch, resume, walking)
        return self._batches(native_epoch, epoch)

    def _batches(self, native_epoch: Any, epoch: int) -> Iterator[Batch]:
        self._current, self._last_epoch = native_epoch, epoch
        try:
            while True:
                raw = native_epoch.next_batch()
                if raw is None:
                    return
                yield self._batch(raw, epoch)
        finally:
            if self._current is native_epoch:
                self._last_state = native_epoch.state_json()
                self._last_metrics = native_epoch.metrics()
                self._current = None
            native_epoch.close()

    def state_dict(self) -> dict[str, Any]:
        """Where the epoch stands: pass it to :meth:`load_state_dict` (in this or a new
        process, with the same options) and the next iteration delivers exactly the batches
        not yet delivered. JSON-serialisable."""
        state = None
        if self._current is not None:
            state = self._current.state_json()
        elif self._last_state is not None and self._last_epoch == self._epoch:
            state = self._last_state
        return {
            "epoch": self._epoch,
            "sampler": json.loads(state) if state is not None else None,
        }

    def metrics(self) -> dict[str, Any]:
        """The counters of the epoch being iterated, or else of the last one: busy times of
        each stage and the consumer's wait (``*_s``, seconds; busy times add up over chunks
        in flight), ``decode_cpu_s`` (the CPU time the decoding threads ran, below
        ``decode_busy_s`` where they waited for a core), ``gpu_busy_s`` (GPU time the
        loader's kernels took, from CUDA events),
        chunks decoded on each side (``cpu_decoded_chunks``, ``gpu_decoded_chunks``), bytes,
        samples and batches. Empty counters before the first epoch."""
        if self._current is not None:
            return self._current.metrics()
        return dict(self._last_metrics) if self._last_metrics is not None else {}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict` at the next iteration."""
        self._epoch = int(state_dict["epoch"])
        sampler = state_dict.get("sampler")
        self._resume = json.dumps(sampler) if sampler is not None else None

    # --- the layout ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self._native.url

    @property
    def device(self) -> str:
        """``"cpu"`` or ``"cuda:N"``."""
        return self._native.device

    @property
    def rank(self) -> int:
        return self._native.rank

    @property
    def world_size(self) -> int:
        return self._native.world_size

    @property
    def channels(self) -> list[str]:
        """Labels of the inputs' channels, in order (``t2m``, ``z[level=3]``, ...)."""
        return self._native.channels

    @property
    def variables(self) -> list[str]:
        return self._native.variables

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """One sample's inputs, ``(channel, window...)``."""
        return tuple(self._native.sample_shape)

    @property
    def num_samples(self) -> int:
        """Samples in the whole epoch, over all ranks."""
        return self._native.num_samples

    @property
    def dims(self) -> list[dict[str, Any]]:
        """The sample dimensions: name, length, window size, stride, whether iterated."""
        return [
            {"name": name, "length": length, "size": size, "stride": stride, "iterated": iterated}
            for name, length, size, stride, iterated in self._native.dims
        ]

    def __repr__(self) -> str:
        return (
            f"zarrpipe.Pipeline({self.url!r}, channels={len(self.channels)}, "
            f"sample_shape={self.sample_shape}, batches={len(self)}, device={self.device!r}, "
            f"rank={self.rank}/{self.world_size})"
        )

    # --- batches ---------------------------------------------------------------------------

    def _batch(self, raw: dict, epoch: int) -> Batch:
        torch = _torch() if self._tensors != "raw" else None
        tensors = {name: raw[name] for name in _TENSORS}
        if torch is not None:
            on_gpu = "pointers" in raw
            convert = torch.from_dlpack if on_gpu else torch.from_numpy
            tensors = {name: convert(t) if t is not None else None for name, t in tensors.items()}
        return Batch(
            **tensors,
            index=raw["index"],
            epoch=epoch,
            samples=[(index, tuple(origin)) for index, origin in raw["samples"]],
            device_pointers=dict(raw.get("pointers", {})),
        )


if _native.cuda_built():
    from ._native import CudaTensor  # noqa: F401

    __all__.append("CudaTensor")
