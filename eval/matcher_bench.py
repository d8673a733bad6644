"""Synthetic benchmark of the pair-free matchers and of Procrustes (run by ``captioner align bench``).

Problem: X (N, d) Gaussian with a power-law spectrum (variance of axis i proportional to i^-alpha) in a
random basis; Y = X Q + noise (Q a random rotation, noise sigma = ``noise`` x the RMS scale of X's
coordinates, 0.05 by default), rows of Y shuffled; at ``overlap`` < 1 only that fraction of Y's rows are
copies of X rows, the others new points from the same distribution. Beside each matcher the oracle: the
one-to-one assignment (Hungarian) of X Q to Y with the true rotation, and its nearest-neighbour variant. A matcher sees only X and the shuffled Y; accuracy is the fraction of X rows matched to
their own shuffled copy. Procrustes is timed against ``scipy.linalg.orthogonal_procrustes`` on paired rows.

Usage: ``python -m eval.matcher_bench --n 2000 --dim 128 --noise 2.0 --overlap 0.5 --no-gw``
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import threading
import time

import numpy as np

from alignment._checks import blas_threads


def make_problem(n: int, d: int, alpha: float = 1.0, noise: float = 0.05, seed: int = 0, overlap: float = 1.0):
    """X (n, d) float32, shuffled Y (n, d) float32, true (n,) with Y[true[i]] the copy of X[i] (-1: X row i has
    no copy in Y, at overlap < 1), Q (d, d)."""
    rng = np.random.default_rng(seed)
    lam = np.arange(1, d + 1, dtype=np.float64) ** -float(alpha)
    with blas_threads(1):
        basis = np.linalg.qr(rng.standard_normal((d, d)))[0]
        Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    X = (rng.standard_normal((n, d)) * np.sqrt(lam)) @ basis
    nc = int(round(overlap * n))
    src = X
    if nc < n:  # the first nc rows of Y's source are copies of random X rows, the rest new points
        common = rng.permutation(n)[:nc]
        src = np.vstack([X[common], (rng.standard_normal((n - nc, d)) * np.sqrt(lam)) @ basis])
    Y = src @ Q + noise * np.sqrt(lam.mean()) * rng.standard_normal((n, d))
    order = rng.permutation(n)  # row j of the shuffled Y is source row order[j]
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    true = np.full(n, -1, np.int64)
    if nc < n:
        true[common] = pos[:nc]
    else:
        true[:] = pos
    return X.astype(np.float32), Y[order].astype(np.float32), true, Q


def oracle(X, Y, true, Q, dense_max: int = 25_000_000) -> dict:
    """Accuracy with the true rotation: one-to-one assignment of X Q to Y (when N1 x N2 <= dense_max) and
    each X Q row's nearest Y row."""
    from alignment.pairfree import _sqdist, knn

    XQ = (X @ Q).astype(np.float32)
    ok = true >= 0
    idx, _ = knn(XQ, Y, k=1)
    out = {"nearest": round(float((idx[ok, 0] == true[ok]).mean()), 4)}
    if len(X) * len(Y) <= dense_max:
        from scipy.optimize import linear_sum_assignment

        r, c = linear_sum_assignment(_sqdist(XQ, Y).numpy())
        perm = np.full(len(X), -1)
        perm[r] = c
        out["assignment"] = round(float((perm[ok] == true[ok]).mean()), 4)
    return out


class _PeakRSS:
    """Peak resident memory of this process while the block runs (samples /proc every 20 ms)."""

    def __enter__(self):
        self.base = self.peak = _rss()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, _rss())

    @property
    def mb(self) -> float:
        return round(self.peak / 2 ** 20, 1)


def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: the process-wide high-water mark instead
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _load_baseline(path):
    """Another version of alignment/pairfree.py (e.g. main's, via ``git show main:alignment/pairfree.py``)
    loaded as a module, to time today's code path in the same run."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("matcher_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["matcher_baseline"] = mod
    spec.loader.exec_module(mod)
    return mod


def _run_one(fn, X, Y, true, Q, seed, **kw):
    with _PeakRSS() as mem:
        t = time.perf_counter()
        res = fn(X, Y, seed=seed, **kw)
        dt = time.perf_counter() - t
    R = res.rotation.matrix() / res.rotation.scale
    return {"seconds": round(dt, 2), "accuracy": round(res.accuracy(true), 4), "mutual_rate": round(res.score, 4),
            "rotation_max_err": round(float(np.abs(R - Q).max()), 4), "peak_rss_mb": mem.mb,
            "stages": res.info.get("timings"), "auto": res.info.get("auto")}


def bench_matchers(n: int, d: int = 384, alpha: float = 1.0, noise: float = 0.05, seed: int = 0, gw: bool = True,
                   gw_max_n: int = 5000, gw_epsilon: float = 0.1, progress: bool = False, overlap: float = 1.0,
                   baseline: str | None = None) -> dict:
    """Time and exact-match accuracy of our matcher ("auto", the default), optionally a baseline version of
    the matcher file, and POT's entropic GW on one synthetic problem, beside the oracle's accuracy."""
    from alignment.pairfree import match
    from alignment.pairfree_baselines import match_gw

    X, Y, true, Q = make_problem(n, d, alpha, noise, seed, overlap)
    row = {"n": n, "dim": d, "alpha": alpha, "noise": noise, "overlap": overlap, "seed": seed,
           "load_avg": round(os.getloadavg()[0], 2), "oracle": oracle(X, Y, true, Q)}
    row["ours"] = _run_one(match, X, Y, true, Q, seed, progress=progress)
    if baseline:
        row["baseline"] = _run_one(_load_baseline(baseline).match_pairfree, X, Y, true, Q, seed)
        row["baseline"]["file"] = baseline
    if not gw:
        row["gw"] = {"skipped": "disabled (--no-gw)"}
    elif n > gw_max_n:
        row["gw"] = {"skipped": f"N={n} > gw_max_n={gw_max_n}: dense N x N costs; measured 240 s and 96.6% "
                                "at N=5000 (epsilon 0.1), so this size would take far longer"}
    else:
        import warnings

        with _PeakRSS() as mem, warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            t = time.perf_counter()
            g = match_gw(X, Y, epsilon=gw_epsilon)
            dt = time.perf_counter() - t
        row["gw"] = {"seconds": round(dt, 2), "accuracy": g.accuracy(true), "epsilon": gw_epsilon,
                     "peak_rss_mb": mem.mb, "warnings": len(w)}
    return row


def bench_procrustes(n: int = 50_000, d: int = 768, repeats: int = 3, seed: int = 0) -> dict:
    """Our fit_procrustes (centred, the default) vs scipy.linalg.orthogonal_procrustes (uncentred) on the
    same float32 pairs; times are the best of ``repeats`` interleaved runs."""
    import scipy.linalg

    from alignment.procrustes import fit_procrustes

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d), dtype=np.float32)
    with blas_threads(1):
        Q = np.linalg.qr(rng.standard_normal((d, d)))[0].astype(np.float32)
    Y = X @ Q + 0.05 * rng.standard_normal((n, d), dtype=np.float32)
    ts, to = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        Rs, _ = scipy.linalg.orthogonal_procrustes(X, Y)
        ts.append(time.perf_counter() - t)
        t = time.perf_counter()
        rot = fit_procrustes(X, Y)
        to.append(time.perf_counter() - t)
    return {"n": n, "dim": d, "dtype": "float32", "repeats": repeats, "scipy_s": round(min(ts), 3),
            "ours_s": round(min(to), 3), "ratio": round(min(to) / min(ts), 3),
            "ours_max_err": float(np.abs(rot.R - Q).max()), "scipy_max_err": float(np.abs(Rs - Q).max())}


def run(ns=(1000, 5000), dim: int = 384, procrustes=(50_000, 768), gw: bool = True, gw_max_n: int = 5000,
        seed: int = 0, progress: bool = False, noises=(0.05,), overlaps=(1.0,), baseline: str | None = None) -> dict:
    """The whole benchmark as one JSON-able dict."""
    import torch  # noqa: F401  imported up front so that no timed run pays for it

    out = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                       "load_avg": list(np.round(os.getloadavg(), 2)) if hasattr(os, "getloadavg") else None},
           "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "matchers": [], "procrustes": None}
    for n in ns:
        for ov in overlaps:
            for nz in noises:
                out["matchers"].append(bench_matchers(n, dim, noise=nz, seed=seed, gw=gw, gw_max_n=gw_max_n,
                                                      progress=progress, overlap=ov, baseline=baseline))
    if procrustes:
        out["procrustes"] = bench_procrustes(*procrustes, seed=seed)
    if hasattr(os, "getloadavg"):
        out["machine"]["load_avg_end"] = list(np.round(os.getloadavg(), 2))
    return out


def table(result: dict) -> str:
    """A human-readable table of :func:`run`'s result."""
    lines = ["| N | d | noise | overlap | oracle (assign / NN) | ours acc | ours s | ours peak MB | baseline acc "
             "| baseline s | GW acc | GW s | load |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["matchers"]:
        g, o, b, orc = r["gw"], r["ours"], r.get("baseline"), r["oracle"]
        gacc = "skipped" if "skipped" in g else f"{g['accuracy']:.4f}"
        gs = "-" if "skipped" in g else f"{g['seconds']:.1f}"
        bacc, bs = (f"{b['accuracy']:.4f}", f"{b['seconds']:.2f}") if b else ("-", "-")
        lines.append(f"| {r['n']} | {r['dim']} | {r['noise']} | {r['overlap']} | {orc.get('assignment', '-')} / "
                     f"{orc['nearest']} | {o['accuracy']:.4f} | {o['seconds']:.2f} | {o['peak_rss_mb']:.0f} | {bacc} "
                     f"| {bs} | {gacc} | {gs} | {r['load_avg']} |")
    p = result.get("procrustes")
    if p:
        lines += ["", f"Procrustes {p['n']} x {p['dim']} ({p['dtype']}): ours {p['ours_s']:.3f} s, scipy "
                      f"{p['scipy_s']:.3f} s, ratio {p['ratio']:.2f}"]
    la = result["machine"].get("load_avg")
    if la:
        lines.append(f"load average at start {la}, at end {result['machine'].get('load_avg_end')} "
                     f"on {result['machine']['cpus']} CPUs")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, action="append", help="problem sizes (repeatable; default 1000 and 5000)")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--no-gw", action="store_true")
    ap.add_argument("--gw-max-n", type=int, default=5000)
    ap.add_argument("--procrustes", default="50000x768", help="NxD for the Procrustes timing, or 'none'")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--noise", type=float, action="append", help="noise x rms(X) (repeatable; default 0.05)")
    ap.add_argument("--overlap", type=float, action="append", help="fraction of Y rows with a partner (default 1)")
    ap.add_argument("--baseline", help="another alignment/pairfree.py to time in the same run")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    pr = None if a.procrustes == "none" else tuple(int(v) for v in a.procrustes.lower().split("x"))
    res = run(a.n or (1000, 5000), a.dim, pr, not a.no_gw, a.gw_max_n, a.seed, progress=not a.json,
              noises=a.noise or (0.05,), overlaps=a.overlap or (1.0,), baseline=a.baseline)
    print(json.dumps(res, indent=2) if a.json else table(res))


if __name__ == "__main__":
    main()
