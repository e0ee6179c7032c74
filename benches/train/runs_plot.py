"""The runs of `benches/train/ab.sh` in the order they ran: samples/s per run, one marker per
build and mode, beside the synthetic runs and the target share of synthetic. Two builds run
side by side on a lent host share its slow and fast periods; this plot shows which runs fell
together.

    python benches/train/runs_plot.py ab.jsonl [more.jsonl ...] --out plot.png \
        [--title TEXT] [--target 0.95]

Each file is one call's runs (its `build`, `loader` and `samples_per_s` fields); the files'
runs are numbered on, in the order given.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def runs_of(paths: list[Path]) -> list[dict]:
    runs = []
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                runs.append(json.loads(line))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default="")
    parser.add_argument("--target", type=float, default=0.95)
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
    series: dict[str, list[tuple[int, float]]] = {}
    for number, run in enumerate(runs, start=1):
        if run["loader"] == "synthetic":
            continue
        mode = run["loader"].removeprefix("zarrpipe-")
        series.setdefault(f"{run.get('build', '?')} {mode}", []).append(
            (number, run["samples_per_s"])
        )
    markers = "osD^v<>px*"
    for index, (label, points) in enumerate(sorted(series.items())):
        xs, ys = zip(*points)
        median = statistics.median(ys)
        ax.plot(xs, ys, markers[index % len(markers)], label=f"{label} (median {median:.1f})")
    ax.axhline(reference, color="black", linewidth=1, label=f"synthetic (median {reference:.1f})")
    ax.axhline(
        args.target * reference,
        color="black",
        linestyle="--",
        linewidth=1,
        label=f"{args.target:.0%} of synthetic",
    )
    ax.set_xlabel("run, in the order the runs ran")
    ax.set_ylabel("samples/s")
    ax.set_title(args.title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.savefig(args.out, dpi=120, bbox_inches="tight")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
