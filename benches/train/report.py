"""The training benchmark's report: results.jsonl (one line per run of
examples/python/train_unet.py, with `setup` and `run` added by run.sh) -> training.md and one
plot per setup, precision and GPU count: the hackathon's three bars (training on real data, the
loader alone, training on synthetic data) for the baseline and for each zarrpipe mode; with
several GPU counts (run.sh's GPUS), a table of how each loader scales.

    python benches/train/report.py results.jsonl --out DIR --host TEXT --command TEXT
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SETUPS = {
    "a": "Setup A: t2m, V500, U500, T500, Z500, Q500 in and out (6 channels)",
    "b": "Setup B: W1's 43 fields in and out",
    "a-advised": "Setup A on the layout `zarrpipe advise` names for it",
    "b-advised": "Setup B on the layout `zarrpipe advise` names for it",
}
# A setup whose model is another's: its synthetic row, when it has none of its own.
SAME_MODEL = {"a-advised": "a", "b-advised": "b"}
LOADER_NAMES = {
    "baseline": "baseline (xarray + DataLoader)",
    "dali": "the hackathon's DALI loader (zarr-python reads into CuPy buffers)",
    "zarrpipe-gpu": "zarrpipe, GPU decode",
    "zarrpipe-cpu": "zarrpipe, CPU decode + GPU collate",
    "zarrpipe-split": "zarrpipe, split decode",
    "zarrpipe-auto": "zarrpipe, auto",
}


def load(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows


def pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}%"


def last_half(row: dict) -> str:
    """Samples/s over the last half of a run's timed steps, where the run gives it."""
    value = row.get("samples_per_s_last_half")
    return "" if value is None else f"{value:.1f}"


def gpus(row: dict) -> int:
    """GPUs (DDP ranks) of a run: its world size."""
    return int(row.get("world_size", 1))


def table(rows: list[dict], setup: str, precision: str, count: int) -> tuple[list[str], dict]:
    """The markdown table of one setup, precision and GPU count, and the figures the plot
    needs."""
    runs = {r["run"]: r for r in rows if r.get("setup") == setup and gpus(r) == count}
    if f"synthetic {precision}" not in runs and setup in SAME_MODEL:
        model = SAME_MODEL[setup]
        runs.update({r["run"]: r for r in rows if r.get("setup") == model and gpus(r) == count
                     and r["run"] == f"synthetic {precision}"})
    synthetic = runs.get(f"synthetic {precision}", {}).get("samples_per_s")
    out = [
        "| loader | training samples/s | over the last half | % of synthetic | data wait | loader GPU time | loader alone samples/s | mean loss |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    bars = {}
    if synthetic:
        row = runs[f"synthetic {precision}"]
        out.append(f"| synthetic (random tensors on the GPU) | {synthetic:.1f} | "
                   f"{last_half(row)} | 100% | {pct(row.get('data_wait_fraction'))} | | | |")
    # Loaders this report has no name for are listed under their own, not left out.
    others = sorted({run.rsplit(" ", 1)[0] for run in runs} - set(LOADER_NAMES) - {"synthetic"})
    for loader, name in [*LOADER_NAMES.items(), *((other, other) for other in others)]:
        train = runs.get(f"{loader} {precision}")
        alone = runs.get(f"{loader} alone")
        if train is None and alone is None:
            continue
        if train is not None and "error" in train:
            out.append(f"| {name} | failed: {train['error'][:120]} | | | | | | |")
            continue
        speed = train.get("samples_per_s") if train else None
        alone_speed = alone.get("samples_per_s") if alone and "error" not in alone else None
        ratio = f"{100 * speed / synthetic:.1f}%" if speed and synthetic else ""
        out.append(
            f"| {name} | {speed:.1f} | {last_half(train)} | {ratio} | {pct(train.get('data_wait_fraction'))} | "
            f"{pct(train.get('loader_gpu_fraction'))} | "
            f"{'' if alone_speed is None else f'{alone_speed:.1f}'} | {train.get('mean_loss', 0):.4f} |"
            if speed else f"| {name} | | | | | | {'' if alone_speed is None else f'{alone_speed:.1f}'} | |")
        bars[name] = (speed, alone_speed)
    return out, {"synthetic": synthetic, "bars": bars}


def scaling(rows: list[dict], setup: str, precision: str, counts: list[int]) -> list[str]:
    """Training samples/s of each loader at every GPU count, and the ratio to one GPU."""
    speeds: dict[str, dict[int, float]] = {}
    for r in rows:
        loader, _, run_precision = r["run"].partition(" ")
        if r.get("setup") == setup and "error" not in r and run_precision == precision:
            speeds.setdefault(loader, {})[gpus(r)] = r["samples_per_s"]
    names = {"synthetic": "synthetic (random tensors on the GPU)", **LOADER_NAMES}
    out = ["| loader | " + " | ".join(f"{c} GPU{'s' if c > 1 else ''} samples/s" for c in counts)
           + " | " + " | ".join(f"{c} GPUs / 1" for c in counts[1:]) + " | "
           + " | ".join(f"% of synthetic, {c} GPUs" for c in counts[1:]) + " |",
           "|---|" + "---:|" * (2 * len(counts) - 1 + len(counts[1:]))]
    synthetic = speeds.get("synthetic", {})
    for loader, name in names.items():
        if loader not in speeds:
            continue
        at = speeds[loader]
        cells = [f"{at[c]:.1f}" if c in at else "" for c in counts]
        cells += [f"{at[c] / at[counts[0]]:.2f}x" if c in at and counts[0] in at else "" for c in counts[1:]]
        cells += [f"{100 * at[c] / synthetic[c]:.1f}%" if c in at and c in synthetic else "" for c in counts[1:]]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return out


def plot(figures: dict, title: str, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib is not installed: no {path.name}", file=sys.stderr)
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(figures["bars"])
    if not names:
        return
    fig, ax = plt.subplots(figsize=(10, 1.4 + 0.75 * len(names)))
    y = range(len(names))
    train = [figures["bars"][n][0] or 0 for n in names]
    alone = [figures["bars"][n][1] or 0 for n in names]
    synthetic = figures["synthetic"] or 0
    ax.barh([i + 0.27 for i in y], train, height=0.26, color="#d62728", label="training on real data")
    ax.barh(list(y), alone, height=0.26, color="#7f7f7f", label="loader alone (no training)")
    ax.barh([i - 0.27 for i in y], [synthetic] * len(names), height=0.26, color="#1f77b4",
            label="training on synthetic data")
    for i, (t, a) in enumerate(zip(train, alone)):
        if t:
            ax.text(t, i + 0.27, f" {t:.1f}", va="center", fontsize=8)
        if a:
            ax.text(a, i, f" {a:.1f}", va="center", fontsize=8)
    ax.set_yticks(list(y), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("samples/s")
    ax.set_title(title, fontsize=10, loc="left")
    # Below the axes: the longest bars would run under it anywhere inside.
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18 - 0.3 / len(names)), ncol=3)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    print(f"wrote {path}", file=sys.stderr)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("results", type=Path)
    p.add_argument("--out", type=Path, default=Path("."))
    p.add_argument("--host", default="")
    p.add_argument("--command", default="benches/train/run.sh")
    args = p.parse_args()
    rows = load(args.results)
    done = [r for r in rows if "error" not in r]
    out = ["# Training benchmark results", ""]
    if done:
        first = done[0]
        out += [f"Host: {args.host}. Command: `{args.command}`.",
                f"Each run: {first['steps']} timed steps after {first['warmup']} untimed, batch "
                f"{first['batch_size']}, fields {first['shape'][0]} x {first['shape'][1]}.", ""]
    for setup, text in SETUPS.items():
        precisions = sorted({r["run"].split()[-1] for r in rows
                             if r.get("setup") == setup and r["run"].split()[-1] in ("fp32", "bf16")})
        for precision in precisions:
            counts = sorted({gpus(r) for r in rows if r.get("setup") == setup})
            for count in counts:
                lines, figures = table(rows, setup, precision, count)
                where = "" if count == 1 else f", {count} GPUs (DDP, a pipeline per rank; samples/s of all ranks)"
                image = f"training_{setup}_{precision}{'' if count == 1 else f'_{count}gpus'}.png"
                out += [f"## {text}, {precision}{where}", "", *lines, "", f"![{setup} {precision}]({image})", ""]
                plot(figures, f"{text}, {precision}{'' if count == 1 else f', {count} GPUs (DDP)'}: samples/s",
                     args.out / image)
            if len(counts) > 1:
                out += [f"## {text}, {precision}: scaling with GPUs", "",
                        *scaling(rows, setup, precision, counts), ""]
    errors = [r for r in rows if "error" in r]
    if errors:
        out += ["Runs that failed or did not run:", ""]
        out += [f"- setup {r.get('setup')}, {r.get('run')}: {r['error']}" for r in errors]
        out.append("")
    (args.out / "training.md").write_text("\n".join(out))
    print(f"wrote {args.out / 'training.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
