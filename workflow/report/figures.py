"""The report's figures (matplotlib, drawn off-screen), each saved as PNG (the HTML embeds it) and SVG (papers):
training curves per setting against step with the seeds' spread as a band, and accuracy against step, backward
passes and FLOPs when the runs were evaluated at more than one step. Every value plotted is a row of a report
query (queries.sql: train_curves, eval_curves)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # off-screen: a login node or CI has no display
import matplotlib.pyplot as plt  # noqa: E402

TRAIN_METRICS = {"reward": "reward", "entropy": "entropy", "response_len": "response length (tokens)", "kl": "KL"}
EVAL_AXES = {"step": "RL step", "backward_passes": "backward passes", "flops": "FLOPs"}


@dataclass(frozen=True)
class Figure:
    name: str  # file stem under report/figures/
    title: str
    png: Path
    svg: Path


def _series(rows: list[dict], key: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r[key], []).append(r)
    return out


def save(fig, out_dir: Path, name: str, title: str) -> Figure:
    out_dir.mkdir(parents=True, exist_ok=True)
    png, svg = out_dir / f"{name}.png", out_dir / f"{name}.svg"
    # the figure's tight extent found once for both files ("tight" draws the figure again for each: ~0.5 s a figure)
    extent = fig.get_tightbbox(fig.canvas.get_renderer()).padded(plt.rcParams["savefig.pad_inches"])
    fig.savefig(png, dpi=110, bbox_inches=extent)
    fig.savefig(svg, bbox_inches=extent, metadata={"Date": None})  # no timestamp: a rerun writes the same file
    plt.close(fig)
    return Figure(name, title, png, svg)


def _legend(fig, handles, names) -> None:
    """One legend for the panels, below them (laid out first, so it covers no axis label)."""
    fig.tight_layout()
    fig.legend(handles, names, loc="upper center", ncol=min(len(names), 4), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 0.0))


def _band(ax, x, rows: list[dict], label: str, color) -> None:
    ax.plot(x, [r["mean"] for r in rows], label=label, color=color, linewidth=1.4)
    if any(r["seeds"] > 1 for r in rows):
        ax.fill_between(x, [r["low"] for r in rows], [r["high"] for r in rows], color=color, alpha=0.2, linewidth=0)


def train_curves(rows: list[dict], out_dir: Path) -> Figure | None:
    """Reward, entropy, response length and KL against step: one line per setting (the mean over seeds), the band
    from the lowest to the highest seed; a step where a seed's SFPO / GXPO gate tripped is marked on the reward."""
    metrics = [m for m in TRAIN_METRICS if any(r["metric"] == m and r["mean"] is not None for r in rows)]
    if not metrics:
        return None
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4), squeeze=False)
    labels = sorted({r["label"] for r in rows})
    colors = dict(zip(labels, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 10))
    for ax, metric in zip(axes[0], metrics):
        for label, series in _series([r for r in rows if r["metric"] == metric], "label").items():
            series = [r for r in series if r["mean"] is not None]
            _band(ax, [r["step"] for r in series], series, label, colors[label])
            trips = [r for r in series if r["gate_trips"]]
            if metric == "reward" and trips:
                ax.scatter([r["step"] for r in trips], [r["mean"] for r in trips], marker="v", s=28,
                           color=colors[label], edgecolor="black", linewidth=0.5, zorder=3)
        ax.set_xlabel("RL step")
        ax.set_title(TRAIN_METRICS[metric], fontsize=10)
        ax.grid(alpha=0.3)
    handles, names = axes[0][0].get_legend_handles_labels()
    if any(r["gate_trips"] for r in rows):
        handles.append(plt.Line2D([], [], marker="v", linestyle="", color="grey", markeredgecolor="black"))
        names.append("gate tripped")
    _legend(fig, handles, names)
    return save(fig, out_dir, "train_curves", "Training curves (mean over seeds; band: lowest to highest seed)")


def method_curves(rows: list[dict], out_dir: Path, per_row: int = 4) -> Figure | None:
    """The per-step numbers the methods' cards declare (the method_curves query), one panel per number, one line
    per setting that logged it (mean over seeds; band: lowest to highest seed): the mechanism at work, e.g. how much
    of a mixed-policy step was off-policy or SFT, and how that changed as the policy learned."""
    metrics = sorted({r["metric"] for r in rows})
    if not metrics:
        return None
    n_rows = -(-len(metrics) // per_row)
    cols = min(per_row, len(metrics))
    fig, axes = plt.subplots(n_rows, cols, figsize=(4.2 * cols, 3.2 * n_rows), squeeze=False)
    labels = sorted({r["label"] for r in rows})
    colors = dict(zip(labels, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 10))
    for ax, metric in zip(axes.flat, metrics):
        for label, series in _series([r for r in rows if r["metric"] == metric], "label").items():
            _band(ax, [r["step"] for r in series], series, label, colors[label])
        ax.set_xlabel("RL step")
        ax.set_title(metric, fontsize=10)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(metrics):]:
        ax.set_visible(False)
    shown = {name: handle for ax in axes.flat for handle, name in zip(*ax.get_legend_handles_labels())}
    _legend(fig, list(shown.values()), list(shown))
    return save(fig, out_dir, "method_curves", "The methods' own per-step numbers (their cards' columns of "
                                                "train_steps; mean over seeds, band: lowest to highest seed)")


def eval_curves(rows: list[dict], out_dir: Path) -> list[Figure]:
    """Per benchmark, avg@k against RL step, backward passes and FLOPs, and GPU-hours where the runs had GPUs (one
    line per setting, band: the seeds' range): settings compared at equal compute. None for a benchmark evaluated at
    one step only: there is no curve to draw."""
    figures = []
    axes_of = dict(EVAL_AXES, **({"gpu_hours": "GPU-hours"} if any(r.get("gpu_hours") for r in rows) else {}))
    for benchmark, bench_rows in _series(rows, "benchmark").items():
        by_label = _series(bench_rows, "label")
        if all(len(series) < 2 for series in by_label.values()):
            continue
        fig, axes = plt.subplots(1, len(axes_of), figsize=(4.2 * len(axes_of), 3.4), squeeze=False)
        colors = dict(zip(sorted(by_label), plt.rcParams["axes.prop_cycle"].by_key()["color"] * 10))
        for ax, (x, title) in zip(axes[0], axes_of.items()):
            for label, series in by_label.items():
                _band(ax, [r[x] or 0.0 for r in series], series, label, colors[label])
            ax.set_xlabel(title)
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(f"{benchmark} avg@k")
        _legend(fig, *axes[0][0].get_legend_handles_labels())
        *first, last = ["step" if t == "RL step" else t for t in axes_of.values()]
        figures.append(save(fig, out_dir, f"accuracy_{benchmark}",
                            f"{benchmark}: accuracy against {', '.join(first)} and {last}"))
    return figures
