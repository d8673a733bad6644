"""The scaling study's figure: alignment vs samples seen, with both laws and their held-out predictions."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from eval.scaling.config import ScalingConfig
from eval.scaling.laws import logistic_law, power_law


def plot(cfg: ScalingConfig, runs: list[dict], analysis: dict, path: Path) -> Path:
    """alignment vs samples seen (log x): seeds as dots, means, each law fitted on the smaller n (power
    law dashed, logistic solid) and its held-out prediction (open circle / square)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    ceiling = None
    colours = {"text-jepa": "tab:blue", "ntp": "tab:red", "ntp-last": "tab:orange"}
    labels = {"text-jepa": "text JEPA (good views)", "ntp": "next-token LM (bad views), mean",
              "ntp-last": "next-token LM (bad views), last token"}
    for m, entry in analysis["methods"].items():
        col = colours.get(m, "k")
        xs = [r["n"] for r in runs if r["method"] == m]
        ys = [r["mutual_knn"] for r in runs if r["method"] == m]
        if not xs:
            continue
        ax.scatter(xs, ys, s=10, color=col, alpha=0.4)
        pts = entry["points"]
        ax.errorbar([p["n"] for p in pts], [p["mean"] for p in pts], yerr=[p["std"] for p in pts], fmt="o",
                    color=col, label=labels.get(m, m), capsize=3)
        grid = np.geomspace(min(xs), max(xs) * 2, 100)
        h = entry.get("holdout", {})
        if "fit" in h:
            f = h["fit"]
            ax.plot(grid, power_law(grid, f["a_inf"], f["b"], f["c"]), "--", color=col, lw=1)
            ax.scatter([h["n"]], [h["predicted"]], s=80, facecolors="none", edgecolors=col, zorder=5)
        h = entry.get("logistic", {}).get("holdout", {})
        if "fit" in h:
            f = h["fit"]
            ceiling = f["hi"]
            ax.plot(grid, logistic_law(grid, f["n50"], f["c"], f["lo"], f["hi"]), "-", color=col, lw=1, alpha=0.7)
            ax.scatter([h["n"]], [h["predicted"]], s=80, marker="s", facecolors="none", edgecolors=col, zorder=5)
    ax.axhline(cfg.k / (cfg.n_test - 1), color="grey", lw=0.8, ls=":", label="chance")
    if ceiling is not None:
        top = max(r["mutual_knn"] for r in runs)
        if top > 0.4 * ceiling:
            ax.axhline(ceiling, color="grey", lw=0.8, ls="-.", label="ceiling (perfect representation)")
        else:   # far above every point: named, not drawn, so the points keep the plot's height
            ax.plot([], [], " ", label=f"ceiling {ceiling:.3f} (perfect representation; above the plot)")
    # legend entries for the two laws (fitted without the largest n; open markers: their predictions)
    ax.plot([], [], "k--", lw=1, label="power law, largest n held out (o: its prediction)")
    if ceiling is not None:
        ax.plot([], [], "k-", lw=1, alpha=0.7, label="logistic law, largest n held out (\u25a1: its prediction)")
    ax.set_xscale("log")
    ticks = sorted({r["n"] for r in runs})
    ax.set_xticks(ticks, [f"{t / 1000:g}k" if t >= 10_000 else str(t) for t in ticks], fontsize=8)
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("training samples seen")
    ax.set_ylabel(f"mutual {cfg.k}-NN with the image JEPA")
    ax.set_title(f"scene lab alignment scaling ({cfg.name})")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
