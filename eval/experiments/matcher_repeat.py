"""Repeated, interleaved timings of the pair-free matcher against a baseline copy of the ``alignment``
package, on one synthetic problem of ``eval.matcher_bench``: the median of warm calls (the bench times one
cold call), per-stage medians, and whether every answer (perm) is identical.

The baseline is a copy of another revision's ``alignment`` package renamed ``alignment_main`` (its own
imports rewritten), in the folder given by ``--baseline-dir``:

    git archive main alignment | tar -x -C /tmp/base && mv /tmp/base/alignment /tmp/base/alignment_main
    grep -rl "alignment\\." /tmp/base/alignment_main | xargs sed -i 's/\\bfrom alignment\\./from alignment_main./g'
    python -m eval experiment matcher-repeat --baseline-dir /tmp/base --n 5000 --reps 11
    python -m eval experiment matcher-repeat --baseline-dir /tmp/base --grid ours   # the answers, 48 problems
"""
from __future__ import annotations

import os
import sys
import time

import click
import numpy as np


def run(baseline_dir: str, n: int = 5000, dim: int = 384, noise: float = 0.05, reps: int = 11) -> dict:
    """Alternate the two matchers ``reps`` times (the order swapped every round) after one warm call each."""
    from alignment.pairfree import match
    from eval.matcher_bench import make_problem

    sys.path.insert(0, baseline_dir)
    from alignment_main.pairfree import match as match_base

    X, Y, true, _ = make_problem(n, dim, 1.0, noise, 0)
    fns = {"new": match, "base": match_base}
    for f in fns.values():
        f(X[:2000], Y[:2000])
    load_start = [round(v, 2) for v in os.getloadavg()]
    secs = {k: [] for k in fns}
    stages = {k: [] for k in fns}
    acc, same = {}, True
    for i in range(reps):
        perms = {}
        for name in (("new", "base") if i % 2 == 0 else ("base", "new")):
            t = time.perf_counter()
            r = fns[name](X, Y)
            secs[name].append(time.perf_counter() - t)
            stages[name].append(r.info["timings"])
            perms[name], acc[name] = r.perm, float(r.accuracy(true))
        same = same and bool((perms["new"] == perms["base"]).all())
    out = {"n": n, "dim": dim, "noise": noise, "reps": reps, "accuracy": acc, "perms_identical": same,
           "load_start": load_start, "load_end": [round(v, 2) for v in os.getloadavg()]}
    for name in fns:
        s = sorted(secs[name])
        out[name] = {"median_s": round(s[len(s) // 2], 3), "min_s": round(s[0], 3),
                     "stages_median": {k: round(float(np.median([x[k] for x in stages[name]])), 3)
                                       for k in stages[name][0]}}
    return out


def grid(baseline_dir: str, method: str = "ours") -> list:
    """Both matchers on the noise / overlap grid (``ours``: N, d in (1000, 64), (2000, 128), (3000, 384),
    noise 0.05-1.5, overlap 1 and 0.5, seeds 0-1; ``auto``: the robustness grid's N=2000, d=128 at noise 1.0
    and 1.5); one row per problem with both accuracies and whether the perms are identical."""
    from alignment.pairfree import match
    from eval.matcher_bench import make_problem

    sys.path.insert(0, baseline_dir)
    from alignment_main.pairfree import match as match_base

    cases = [(2000, 128, nz, ov, 0) for nz in (1.0, 1.5) for ov in (1.0, 0.5)] if method == "auto" else \
        [(n, d, nz, ov, sd) for n, d in ((1000, 64), (2000, 128), (3000, 384)) for nz in (0.05, 0.5, 1.0, 1.5)
         for ov in (1.0, 0.5) for sd in (0, 1)]
    rows = []
    for n, d, nz, ov, sd in cases:
        X, Y, true, _ = make_problem(n, d, 1.0, nz, sd, ov)
        a, b = match(X, Y, method=method), match_base(X, Y, method=method)
        rows.append({"n": n, "dim": d, "noise": nz, "overlap": ov, "seed": sd, "acc_new": float(a.accuracy(true)),
                     "acc_base": float(b.accuracy(true)), "same": bool(np.array_equal(a.perm, b.perm))})
        print(rows[-1], flush=True)
    return rows


@click.command("matcher-repeat", help=__doc__)
@click.option("--baseline-dir", required=True)
@click.option("--n", type=int, default=5000, show_default=True)
@click.option("--dim", type=int, default=384, show_default=True)
@click.option("--noise", type=float, default=0.05, show_default=True)
@click.option("--reps", type=int, default=11, show_default=True)
@click.option("--grid", "grid_of", type=click.Choice(("ours", "auto")), default=None,
              help="compare the answers on a grid instead")
def cli(baseline_dir, n, dim, noise, reps, grid_of):
    if grid_of:
        rows = grid(baseline_dir, grid_of)
        print(f"identical perms on {sum(r['same'] for r in rows)} of {len(rows)} problems; load {os.getloadavg()}")
        return
    out = run(baseline_dir, n, dim, noise, reps)
    for name in ("new", "base"):
        print(f"{name:4s} median {out[name]['median_s']:.3f} s  min {out[name]['min_s']:.3f} s  "
              f"accuracy {out['accuracy'][name]:.4f}  stages {out[name]['stages_median']}")
    print(f"perms identical in all {out['reps']} rounds: {out['perms_identical']}; load average at start "
          f"{out['load_start']}, at end {out['load_end']} on {os.cpu_count()} CPUs")
