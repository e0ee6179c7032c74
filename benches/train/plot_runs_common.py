"""What the plots of `benches/train/ab.sh` runs share: their command line, the synthetic
reference read from the runs, and the reference and target lines, legend and file."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def arguments(doc: str, target: float) -> argparse.Namespace:
    """The command line of a plot script whose docstring is `doc`: the runs' files, `--out`,
    `--title` and `--target` (a share of synthetic, `target` by default)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default="")
    parser.add_argument("--target", type=float, default=target)
    return parser.parse_args()


def runs_of(paths: list[Path]) -> list[dict]:
    """Every run of the files, in the order given."""
    runs = []
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                runs.append(json.loads(line))
    return runs


def synthetic_median(runs: list[dict]) -> float:
    """The median samples/s of the synthetic runs, which the target is a share of."""
    synthetic = [run["samples_per_s"] for run in runs if run["loader"] == "synthetic"]
    if not synthetic:
        raise SystemExit("no synthetic run: the target needs one")
    return statistics.median(synthetic)


def figure(args: argparse.Namespace):
    """The runs of `args.files`, their synthetic median, and a figure and axes to draw them on
    (matplotlib, writing files only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = runs_of(args.files)
    reference = synthetic_median(runs)
    fig, ax = plt.subplots(figsize=(8, 4))
    return runs, reference, fig, ax


def finish(fig, ax, args: argparse.Namespace, reference: float, xlabel: str) -> None:
    """Draws synthetic and the target share of it, labels the axes and writes `args.out`."""
    ax.axhline(reference, color="black", linewidth=1, label=f"synthetic (median {reference:.1f})")
    ax.axhline(
        args.target * reference,
        color="black",
        linestyle="--",
        linewidth=1,
        label=f"{args.target:.0%} of synthetic",
    )
    ax.set_xlabel(xlabel)
    ax.set_ylabel("samples/s")
    ax.set_title(args.title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.savefig(args.out, dpi=120, bbox_inches="tight")
    print(f"wrote {args.out}")
