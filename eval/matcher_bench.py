"""Synthetic benchmark of the pair-free matchers and of Procrustes (run by ``python -m eval align bench``).

Problem: X (N, d) Gaussian with a power-law spectrum (variance of axis i proportional to i^-alpha) in a
random basis; Y = X Q + noise (Q a random rotation, noise sigma = ``noise`` x the RMS scale of X's
coordinates, 0.05 by default), rows of Y shuffled; at ``overlap`` < 1 only that fraction of Y's rows are
copies of X rows, the others new points from the same distribution. Beside each matcher the oracle: the
one-to-one assignment (Hungarian) of X Q to Y with the true rotation, and its nearest-neighbour variant. A matcher sees only X and the shuffled Y; accuracy is the fraction of X rows matched to
their own shuffled copy. Procrustes is timed against ``scipy.linalg.orthogonal_procrustes`` on paired rows.

Usage: ``python -m eval align bench --n 2000 --dim 128 --noise 2.0 --overlap 0.5 --no-gw``
"""
from __future__ import annotations

import os
import platform
import threading
import time

import numpy as np

from alignment._checks import blas_threads


def make_problem(n: int, d: int, alpha: float = 1.0, noise: float = 0.05, seed: int = 0, overlap: float = 1.0,
                 draw_seed: int | None = None):
    """X (n, d) float32, shuffled Y (n, d) float32, true (n,) with Y[true[i]] the copy of X[i] (-1: X row i has
    no copy in Y, at overlap < 1), Q (d, d). ``draw_seed``: draw the rows from this seed instead, keeping
    ``seed``'s basis and Q (a fresh sample of the same problem)."""
    rng = np.random.default_rng(seed)
    lam = np.arange(1, d + 1, dtype=np.float64) ** -float(alpha)
    with blas_threads(1):
        basis = np.linalg.qr(rng.standard_normal((d, d)))[0]
        Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    if draw_seed is not None:
        rng = np.random.default_rng(draw_seed)
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


def make_problem_chunked(n: int, d: int, alpha: float = 1.0, noise: float = 0.05, seed: int = 0,
                         overlap: float = 1.0, chunk: int = 65536):
    """:func:`make_problem`'s distribution synthesised in float32 blocks of ``chunk`` rows, for large n (memory:
    X and Y, 8 n d bytes, plus one block; Y's rows are written in their shuffled order, so no copy). Not
    the same draws as :func:`make_problem` for a given seed."""
    rng = np.random.default_rng(seed)
    lam = np.arange(1, d + 1, dtype=np.float64) ** -float(alpha)
    with blas_threads(1):
        basis = np.linalg.qr(rng.standard_normal((d, d)))[0]
        Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    sq, b32, q32 = np.sqrt(lam).astype(np.float32), basis.astype(np.float32), Q.astype(np.float32)
    sigma = np.float32(noise * np.sqrt(lam.mean()))
    X = np.empty((n, d), np.float32)
    for s in range(0, n, chunk):
        X[s:s + chunk] = (rng.standard_normal((min(chunk, n - s), d), dtype=np.float32) * sq) @ b32
    nc = int(round(overlap * n))
    common = rng.permutation(n)[:nc] if nc < n else np.arange(n)
    order = rng.permutation(n)  # row j of Y is source row order[j]: a copy of X[common[order[j]]] or new
    Y = np.empty((n, d), np.float32)
    for s in range(0, n, chunk):
        src = order[s:s + chunk]
        old = src < nc
        rows = np.empty((len(src), d), np.float32)
        rows[old] = X[common[src[old]]]
        if not old.all():
            rows[~old] = (rng.standard_normal((int((~old).sum()), d), dtype=np.float32) * sq) @ b32
        Y[s:s + chunk] = rows @ q32 + sigma * rng.standard_normal((len(src), d), dtype=np.float32)
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    true = np.full(n, -1, np.int64)
    true[common] = pos[:nc]
    return X, Y, true, Q


def oracle(X, Y, true, Q, dense_max: int = 25_000_000, sample: int | None = None, seed: int = 0) -> dict:
    """Accuracy with the true rotation: one-to-one assignment of X Q to Y (when N1 x N2 <= dense_max) and
    each X Q row's nearest Y row (on ``sample`` random rows of X when given: large N)."""
    from alignment.neighbours import knn, sqdist

    ok = true >= 0
    rows = np.flatnonzero(ok)
    if sample is not None and sample < len(rows):
        rows = np.sort(np.random.default_rng(seed).choice(rows, sample, replace=False))
    idx, _ = knn((X[rows] @ Q).astype(np.float32), Y, k=1)
    out = {"nearest": round(float((idx[:, 0] == true[rows]).mean()), 4)}
    if sample is not None and sample < int(ok.sum()):
        out["nearest_sample"] = int(len(rows))
    if len(X) * len(Y) <= dense_max:
        from scipy.optimize import linear_sum_assignment

        r, c = linear_sum_assignment(sqdist((X @ Q).astype(np.float32), Y).numpy())
        perm = np.full(len(X), -1)
        perm[r] = c
        out["assignment"] = round(float((perm[ok] == true[ok]).mean()), 4)
    return out


class PeakRSS:
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
    loaded as a module, to time today's code path in the same run. The folder above the file's folder goes
    on sys.path, so a renamed copy of the whole package (``/tmp/m/alignment_main/pairfree.py`` importing
    ``alignment_main.matching`` ...) brings its own helpers rather than today's."""
    import importlib.util
    import sys
    from pathlib import Path

    root = str(Path(path).resolve().parents[1])
    if root not in sys.path:
        sys.path.append(root)

    spec = importlib.util.spec_from_file_location("matcher_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["matcher_baseline"] = mod
    spec.loader.exec_module(mod)
    return mod


def _run_one(fn, X, Y, true, Q, seed, **kw):
    with PeakRSS() as mem:
        t = time.perf_counter()
        res = fn(X, Y, seed=seed, **kw)
        dt = time.perf_counter() - t
    R = res.rotation.matrix() / res.rotation.scale
    return {"seconds": round(dt, 2), "accuracy": round(res.accuracy(true), 4), "mutual_rate": round(res.score, 4),
            "rotation_max_err": round(float(np.abs(R - Q).max()), 4), "peak_rss_mb": mem.mb,
            "maxrss_mb": _maxrss_mb(), "load_avg_end": round(os.getloadavg()[0], 2),
            "stages": res.info.get("timings"), "auto": res.info.get("auto")}


def _maxrss_mb() -> float:
    """The process's resident-memory high-water mark so far (getrusage), in MB."""
    import resource
    import sys

    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(r / 2 ** 20 if sys.platform == "darwin" else r / 1024, 1)


# above this N the problem is synthesised in blocks (make_problem_chunked) and the oracle's nearest neighbour
# is measured on a sample of rows (its exact search over all rows would cost more than the matcher)
LARGE_N = 60_000


def bench_matchers(n: int, d: int = 384, alpha: float = 1.0, noise: float = 0.05, seed: int = 0, gw: bool = True,
                   gw_max_n: int = 5000, gw_epsilon: float = 0.1, progress: bool = False, overlap: float = 1.0,
                   baseline: str | None = None, baseline_max_n: int = 50_000, device=None) -> dict:
    """Time, peak memory and exact-match accuracy of our matcher ("auto", the default), optionally a baseline
    version of the matcher file (up to ``baseline_max_n``), and POT's entropic GW on one synthetic problem,
    beside the oracle's accuracy. ``device``: torch device of our matcher's candidate search (e.g. "cuda")."""
    from alignment.pairfree import match
    from alignment.pairfree_baselines import match_gw

    large = n > LARGE_N
    X, Y, true, Q = (make_problem_chunked if large else make_problem)(n, d, alpha, noise, seed, overlap)
    row = {"n": n, "dim": d, "alpha": alpha, "noise": noise, "overlap": overlap, "seed": seed,
           "generator": "chunked" if large else "dense", "load_avg": round(os.getloadavg()[0], 2),
           "oracle": oracle(X, Y, true, Q, sample=500 if large else None, seed=seed)}
    row["ours"] = _run_one(match, X, Y, true, Q, seed, progress=progress, **({"device": device} if device else {}))
    if baseline and n > baseline_max_n:
        row["baseline"] = {"skipped": f"N={n} > baseline_max_n={baseline_max_n}", "file": baseline}
    elif baseline:
        row["baseline"] = _run_one(_load_baseline(baseline).match_pairfree, X, Y, true, Q, seed)
        row["baseline"]["file"] = baseline
    if not gw:
        row["gw"] = {"skipped": "disabled (--no-gw)"}
    elif n > gw_max_n:
        row["gw"] = {"skipped": f"N={n} > gw_max_n={gw_max_n}: dense N x N costs; measured 240 s and 96.6% "
                                "at N=5000 (epsilon 0.1), so this size would take far longer"}
    else:
        import warnings

        with PeakRSS() as mem, warnings.catch_warnings(record=True) as w:
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
        seed: int = 0, progress: bool = False, noises=(0.05,), overlaps=(1.0,), baseline: str | None = None,
        baseline_max_n: int = 50_000) -> dict:
    """The whole benchmark as one JSON-able dict."""
    import torch  # noqa: F401  imported up front so that no timed run pays for it

    out = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                       "load_avg": [round(float(v), 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None},
           "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "matchers": [], "procrustes": None}
    for n in ns:
        for ov in overlaps:
            for nz in noises:
                out["matchers"].append(bench_matchers(n, dim, noise=nz, seed=seed, gw=gw, gw_max_n=gw_max_n,
                                                      progress=progress, overlap=ov, baseline=baseline,
                                                      baseline_max_n=baseline_max_n))
    out["scaling"] = scaling(out["matchers"])
    if procrustes:
        out["procrustes"] = bench_procrustes(*procrustes, seed=seed)
    if hasattr(os, "getloadavg"):
        out["machine"]["load_avg_end"] = [round(float(v), 2) for v in os.getloadavg()]
    return out


def scaling(rows) -> list:
    """Per problem setting (noise, overlap) with two sizes or more: the growth of the per-point cost from the
    smallest N >= 50,000 (else the smallest) to the largest, beside N log N's, log(N2) / log(N1)."""
    out = []
    for key in sorted({(r["noise"], r["overlap"]) for r in rows}):
        rs = sorted((r for r in rows if (r["noise"], r["overlap"]) == key), key=lambda r: r["n"])
        if len(rs) < 2:
            continue
        lo = next((r for r in rs if r["n"] >= 50_000 and r is not rs[-1]), rs[0])
        hi = rs[-1]
        ratio = (hi["ours"]["seconds"] / hi["n"]) / max(lo["ours"]["seconds"] / lo["n"], 1e-12)
        nlogn = np.log(hi["n"]) / np.log(lo["n"])
        out.append({"noise": key[0], "overlap": key[1], "n1": lo["n"], "n2": hi["n"],
                    "per_point_ratio": round(float(ratio), 3), "nlogn_ratio": round(float(nlogn), 3),
                    "within_nlogn": bool(ratio <= nlogn)})
    return out


def table(result: dict) -> str:
    """A human-readable table of :func:`run`'s result."""
    lines = ["| N | d | noise | overlap | oracle (assign / NN) | ours acc | ours s | ours peak MB | baseline acc "
             "| baseline s | GW acc | GW s | load |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["matchers"]:
        g, o, b, orc = r["gw"], r["ours"], r.get("baseline"), r["oracle"]
        gacc = "skipped" if "skipped" in g else f"{g['accuracy']:.4f}"
        gs = "-" if "skipped" in g else f"{g['seconds']:.1f}"
        bacc, bs = (f"{b['accuracy']:.4f}", f"{b['seconds']:.2f}") if b and "skipped" not in b else ("-", "-")
        lines.append(f"| {r['n']} | {r['dim']} | {r['noise']} | {r['overlap']} | {orc.get('assignment', '-')} / "
                     f"{orc['nearest']} | {o['accuracy']:.4f} | {o['seconds']:.2f} | {o['peak_rss_mb']:.0f} | {bacc} "
                     f"| {bs} | {gacc} | {gs} | {r['load_avg']} |")
    for c in result.get("scaling", []):
        lines.append(f"per-point cost (t/N) at N={c['n2']} over N={c['n1']} (noise {c['noise']}, overlap "
                     f"{c['overlap']}): {c['per_point_ratio']:.3f}; N log N: log({c['n2']})/log({c['n1']}) = "
                     f"{c['nlogn_ratio']:.3f}; grows no faster than N log N: {'yes' if c['within_nlogn'] else 'no'}")
    p = result.get("procrustes")
    if p:
        lines += ["", f"Procrustes {p['n']} x {p['dim']} ({p['dtype']}): ours {p['ours_s']:.3f} s, scipy "
                      f"{p['scipy_s']:.3f} s, ratio {p['ratio']:.2f}"]
    la = result["machine"].get("load_avg")
    if la:
        lines.append(f"load average at start {la}, at end {result['machine'].get('load_avg_end')} "
                     f"on {result['machine']['cpus']} CPUs")
    return "\n".join(lines)
