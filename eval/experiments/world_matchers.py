"""The world's pair-free settings under each matcher of ``alignment.pairfree.match`` (ours, auto, rosetta),
with the text JEPA, against paired Procrustes and a random rotation: matcher accuracy (same scenes), held-out
residual, R@1, CIDEr x100 of the retrieved caption and mean zero-shot top-1 (the world report's columns,
``eval.world.chain``). Needs the world's models (``captioner world train --preset P --seed N``).

    python -m eval experiment world-matchers [--seed 2] [--preset lab] [--json]
"""
from __future__ import annotations

import json
import os
import sys
import time

import click

# key -> (rotation kind, options, data, label), as eval.world.chain.ROTATIONS
MATCHERS = {
    "auto-disjoint": ("pairfree", {"matcher": "auto"}, "disjoint", "pair-free auto (disjoint scenes)"),
    "rosetta-disjoint": ("pairfree", {"matcher": "rosetta"}, "disjoint", "pair-free rosetta (disjoint scenes)"),
    "rosetta-same": ("pairfree", {"matcher": "rosetta"}, "same", "pair-free rosetta (same scenes)"),
}
ORDER = ["paired", "pairfree-disjoint", "auto-disjoint", "rosetta-disjoint", "pairfree-same", "rosetta-same",
         "random"]


def run(seed: int = 2, preset: str = "lab") -> dict:
    import eval.world.chain as chain
    from captioner.world.setting import setting

    rotations = {**chain.ROTATIONS, **MATCHERS}
    saved, chain.ROTATIONS = chain.ROTATIONS, rotations
    try:
        t0 = time.time()
        st = setting(seed=seed)
        rows = chain.run_seed(st, preset, text_keys=["text-jepa"], rotation_keys=ORDER)
        chain.cider(rows, st.test)
    finally:
        chain.ROTATIONS = saved
    keep = ("rotation", "matcher_accuracy", "residual", "r_at_1", "cider_x100", "zeroshot_mean", "fit_seconds",
            "error")
    return {"seed": seed, "preset": preset, "seconds": round(time.time() - t0, 1), "loadavg": os.getloadavg(),
            "labels": {k: rotations[k][3] for k in ORDER},
            "rows": [{k: r[k] for k in keep if k in r} for r in rows]}


def table(res: dict) -> str:
    out = ["| rotation | matcher acc. | held-out residual | R@1 | CIDEr x100 | zero-shot mean | fit s |",
           "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        label = res["labels"][r["rotation"]]
        if "error" in r:
            out.append(f"| {label} | {r['error']} | | | | | |")
            continue
        acc = "-" if r.get("matcher_accuracy") is None else f"{r['matcher_accuracy']:.3f}"
        out.append(f"| {label} | {acc} | {r['residual']:.3f} | {r['r_at_1']:.3f} | {r['cider_x100']:.1f} | "
                   f"{r['zeroshot_mean']:.3f} | {r['fit_seconds']} |")
    return "\n".join(out)


@click.command("world-matchers", help=__doc__)
@click.option("--seed", type=int, default=2, show_default=True)
@click.option("--preset", default="lab", show_default=True)
@click.option("--json", "as_json", is_flag=True)
def cli(seed, preset, as_json):
    res = run(seed, preset)
    print(json.dumps(res, indent=1) if as_json else table(res))
    print(f"world {preset} seed {seed}, text JEPA; {res['seconds']} s; load average {res['loadavg']}",
          file=sys.stderr)
