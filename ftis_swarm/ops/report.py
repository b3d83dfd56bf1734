"""`ftis-node report`: PNG plots of run directories' curves, one line per node.

Panels: own reward, held-out accuracy (greedy pass@1 on the node's held-out set from round 0,
and on each of its `eval_tasks`: node/heldout.py), peers' groups used, fraction of peers'
samples filtered, mean importance weight, and round time. A person should see at a glance
whether the swarm helps: the held-out curves of nodes trained together against the same
nodes alone. (Own accuracy has no panel: with a binary reward it is the reward.)
"""

from __future__ import annotations

from pathlib import Path

from ftis_swarm.metrics import read_jsonl

PANELS = (
    ("reward", "own reward (mean over samples)"),
    ("heldout_acc", "held-out accuracy (greedy pass@1)"),
    ("peer_groups", "peers' groups in the update"),
    ("frac_offpolicy_filtered", "peers' samples filtered"),
    ("mean_weight", "mean importance weight"),
    ("time_round", "round time (s)"),
)


def plot_runs(run_dirs: list[Path], out: Path, *, smooth: int = 1) -> Path:
    """Draws the panels for every run directory into one PNG at `out`."""
    import matplotlib.pyplot as plt

    fig = draw_runs(run_dirs, smooth=smooth)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def draw_runs(run_dirs: list[Path], *, smooth: int = 1):
    """The report's figure (matplotlib, Agg): one panel per `PANELS` entry, x ticks at whole rounds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for run_dir in run_dirs:
        rows = list(read_jsonl(run_dir / "metrics.jsonl"))
        for ax, (key, title) in zip(axes.flat, PANELS):
            ax.set_title(title)
            ax.set_xlabel("round")
            keys = [key] + (sorted({k for r in rows for k in r if k.startswith("heldout_acc_")})
                            if key == "heldout_acc" else [])  # each further task's held-out curve too
            for k in keys:
                pts = [(r["round"], r[k]) for r in rows if isinstance(r.get(k), (int, float))]
                if not pts:
                    continue
                xs, ys = zip(*pts)
                ys = list(ys) if key == "heldout_acc" else _moving_average(list(ys), smooth)  # few points: raw
                label = run_dir.name + (f" {k[len('heldout_acc_'):]}" if k != key else "")
                ax.plot(xs, ys, marker="o", markersize=3, label=label, linestyle="--" if k != key else "-")
    for ax in axes.flat:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # a round is a whole number
        if ax.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _moving_average(ys: list[float], k: int) -> list[float]:
    if k <= 1:
        return ys
    return [sum(ys[max(0, i - k + 1) : i + 1]) / len(ys[max(0, i - k + 1) : i + 1]) for i in range(len(ys))]
