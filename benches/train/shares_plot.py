"""Training pace against the GPU's share of the chunks: each zarrpipe run of
`benches/train/ab.sh` at the share of chunks it decoded on the GPU (a fixed split's, `auto`'s
over the whole run, GPU decoding's 1), beside synthetic and a target share of it. It shows
where the mix that trains fastest lies and where `auto` ended.

    python benches/train/shares_plot.py ab.jsonl [more.jsonl ...] --out plot.png \
        [--title TEXT] [--target 0.8]

Each file is one call's runs (their `loader`, `samples_per_s`, `gpu_decoded_chunks` and
`cpu_decoded_chunks` fields); synthetic is the median of the files' synthetic runs.
"""

from __future__ import annotations

from plot_runs_common import arguments, figure, finish


def gpu_share(run: dict) -> float | None:
    """The share of the run's chunks decoded on the GPU; `None` where the run does not say."""
    gpu, cpu = run.get("gpu_decoded_chunks"), run.get("cpu_decoded_chunks")
    if gpu is None or cpu is None or gpu + cpu == 0:
        return None
    return gpu / (gpu + cpu)


def main() -> None:
    args = arguments(__doc__, target=0.8)

    runs, reference, fig, ax = figure(args)
    series: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        share = gpu_share(run)
        if run["loader"] == "synthetic" or share is None:
            continue
        mode = run["loader"].removeprefix("zarrpipe-")
        label = {"split": "a fixed split", "gpu": "GPU decoding", "cpu": "CPU decoding"}.get(
            mode, mode
        )
        series.setdefault(label, []).append((share, run["samples_per_s"]))
    markers = "osD^v<>px*"
    for index, (label, points) in enumerate(sorted(series.items())):
        xs, ys = zip(*points)
        ax.plot(xs, ys, markers[index % len(markers)], label=label)
    ax.set_xlim(0, 1.05)
    finish(fig, ax, args, reference, "share of the run's chunks decoded on the GPU")


if __name__ == "__main__":
    main()
