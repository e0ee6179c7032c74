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

import argparse
import statistics
from pathlib import Path

from runs_plot import runs_of


def gpu_share(run: dict) -> float | None:
    """The share of the run's chunks decoded on the GPU; `None` where the run does not say."""
    gpu, cpu = run.get("gpu_decoded_chunks"), run.get("cpu_decoded_chunks")
    if gpu is None or cpu is None or gpu + cpu == 0:
        return None
    return gpu / (gpu + cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default="")
    parser.add_argument("--target", type=float, default=0.8)
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = runs_of(args.files)
    synthetic = [run["samples_per_s"] for run in runs if run["loader"] == "synthetic"]
    if not synthetic:
        raise SystemExit("no synthetic run: the target needs one")
    reference = statistics.median(synthetic)

    fig, ax = plt.subplots(figsize=(8, 4))
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
    ax.axhline(reference, color="black", linewidth=1, label=f"synthetic (median {reference:.1f})")
    ax.axhline(
        args.target * reference,
        color="black",
        linestyle="--",
        linewidth=1,
        label=f"{args.target:.0%} of synthetic",
    )
    ax.set_xlabel("share of the run's chunks decoded on the GPU")
    ax.set_ylabel("samples/s")
    ax.set_xlim(0, 1.05)
    ax.set_title(args.title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.savefig(args.out, dpi=120, bbox_inches="tight")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
