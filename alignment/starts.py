"""Several starts, one refinement, one label-free choice: the pair-free matcher for real encoders.

Each start is refined by deterministic annealing of an entropic (Sinkhorn) assignment from a high to a low
temperature, then by Hungarian rounds (:func:`alignment.rosetta.anneal_soft`, :func:`alignment.rosetta.refine`).

On real encoders the refinement of :mod:`alignment.rosetta` (Hungarian assignment <-> Procrustes) has a wide
basin: on MiniLM-L6 -> MiniLM-L3 (CuPL, 3,000 sentences a side, disjoint halves) a start whose test FOSCTTM is
0.035 (cosine 0.22 with the true rotation) refines to 2e-4. What fails is the start. So this matcher makes
several kinds of start, refines each, and keeps the one with the best :func:`alignment.rosetta.assignment_score`
(the mean similarity of a Hungarian assignment on held-out halves; the true rotation scored 0.42 there,
wrong answers 0.31-0.34, a random rotation 0.25):

* ``profile``: the similarity-distribution start of VecMap (Artetxe et al. 2018, written from the paper): each
  row is described by the sorted row of the square root of its side's Gram matrix, which no rotation changes;
  rows of X and Y are paired by CSLS nearest neighbours between the descriptions; Procrustes on those pairs.
  It needs the same items on both sides (2.7 % of the rows paired right on CuPL were enough), not disjoint
  ones;
* ``identity``: the raw coordinates taken as already aligned (only when D1 == D2): encoders distilled from one
  teacher or fine-tuned from one checkpoint often share their axes (MiniLM-L6 and -L3 do: FOSCTTM 0.003);
* ``cluster``: the Rosetta paper's cluster-QAP start (:func:`alignment.rosetta.cluster_start`);
* ``init``: assignments from other matchers (e.g. the PCA matcher ``ours``), Procrustes on their pairs.

Example
-------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> X = rng.standard_normal((800, 12)) * np.linspace(2, 0.5, 12) ** 2 + rng.standard_normal((800, 1)) ** 3
>>> Q = np.linalg.qr(rng.standard_normal((12, 12)))[0]
>>> order = rng.permutation(800)
>>> res = match_multistart(X, (X @ Q)[order], starts=("profile",))
>>> float((order[res.perm] == np.arange(800)).mean()) > 0.95
True
"""
from __future__ import annotations

import time

import numpy as np

from alignment._checks import blas_threads
from alignment.errors import AlignmentError
from alignment.matching import MatchResult, check_seeds, prepare, rotation_from
from alignment.rosetta import anneal_soft, assignment_score, cluster_start, polar, refine, seeded_cross_cov

STARTS = ("profile", "identity", "cluster")
# default shared dimension: EfficientNet features (1280-d) at full dimension took over 5 minutes a problem
# (80 polar factors of 1280 x 1280 per annealed start); text encoders (384-d) are unaffected
MAX_DIM = 384


def _profile(Z):
    """Rows of sqrt(Z Z^T) sorted in decreasing order, centred and L2-normalised: a description of each row
    of Z (n, d) that no rotation of Z changes."""
    Z = Z / np.maximum(np.linalg.norm(Z, axis=1, keepdims=True), 1e-12)
    U, s, _ = np.linalg.svd(Z.astype(np.float64), full_matrices=False)
    S = (U * s) @ U.T  # the symmetric square root of the Gram matrix
    S = -np.sort(-S, axis=1)
    S -= S.mean(0)
    return S / np.maximum(np.linalg.norm(S, axis=1, keepdims=True), 1e-12)


def profile_start(A, B, sample: int = 4000, k: int = 10, seed: int = 0) -> np.ndarray:
    """The VecMap similarity-distribution start (module doc) on at most ``sample`` rows a side.
    A (N1, d), B (N2, d). Returns a rotation (d, d)."""
    rng = np.random.default_rng(seed)
    xs = np.sort(rng.permutation(len(A))[:sample])
    ys = np.sort(rng.permutation(len(B))[:sample])
    m = min(len(xs), len(ys))  # profiles of equal length: the same quantiles on both sides
    xs, ys = xs[:m], ys[:m]
    with blas_threads(1):
        sim = _profile(A[xs]) @ _profile(B[ys]).T  # (m, m)
    kk = min(k, m - 1)
    ra = -np.partition(-sim, kk - 1, axis=1)[:, :kk].mean(1)
    rb = -np.partition(-sim, kk - 1, axis=0)[:kk].mean(0)
    nn = (2 * sim - rb[None, :]).argmax(1)  # CSLS: hubs of B penalised (ra is constant along a row)
    del ra
    return polar(A[xs].T.astype(np.float64) @ B[ys[nn]].astype(np.float64))


def identity_start(prep) -> np.ndarray | None:
    """The raw axes taken as aligned, as a rotation between the two PCA bases (d, d): Vx^T Vy; None when the
    raw dimensions differ."""
    if prep.Vx.shape[0] != prep.Vy.shape[0]:
        return None
    return polar(prep.Vx.T.astype(np.float64) @ prep.Vy.astype(np.float64))


def match_multistart(X, Y, starts=STARTS, init=None, dim: int | None = None, rounds: int = 100,
                     batch: int = 4096, clusters: int = 30, restarts: int = 30, sample: int = 4000,
                     refine_top: int = 2, soft: bool = True, seeds=None,
                     normalize: bool = True, rows_l2: bool = True, seed: int = 0, dense_max: int = 5_000_000,
                     progress: bool = False, **meta) -> MatchResult:
    """Long: the parameters' documentation and the record of every candidate are most of it.

    Pair-free rotation from several starts, each refined, the best by a label-free score (module doc).

    Parameters
    ----------
    X : (N1, D1) ; Y : (N2, D2), rows in any order, no pairs
    starts : which built-in starts to make, from ``STARTS`` ("profile", "identity", "cluster")
    init : optional assignments (N1,) from other matchers (X row -> Y row, -1 none), each a further start
    dim : shared dimension (default min(D1, D2, ``MAX_DIM``, N1 - 1, N2 - 1)): the top principal axes
    rounds, batch : refinement rounds and rows per side of each round's Hungarian assignment
    clusters, restarts : the cluster start's k-means centres and restarts
    sample : rows per side for the profile start (its cost is O(sample^2 d))
    refine_top : how many starts, the best by their assignment score before refinement, are refined
    soft : refine each start first by deterministic annealing of the soft (entropic) assignment
        (:func:`alignment.rosetta.anneal_soft`), then by Hungarian rounds
    seeds : optional known pairs [(i, j), ...], weighted into every Procrustes fit (k / p each)
    normalize, rows_l2 : unit total variance per side; centre and L2-normalise rows (the Rosetta paper's
        preprocessing, the default)
    seed : random seed of samples and batches
    dense_max : largest N1 * N2 of the final one-to-one assignment solved densely

    Returns
    -------
    MatchResult whose ``score`` is the winner's assignment score; ``info["candidates"]`` lists every start
    with its score before (and, if refined, after) refinement and its time.
    """
    from alignment.neighbours import assign, mutual_and_coupling

    t0 = time.perf_counter()
    bad = [s for s in starts if s not in STARTS]
    if bad:
        raise AlignmentError(f"unknown start {bad[0]!r}; known: {', '.join(STARTS)}")
    if dim is None:  # the top principal axes only: each annealing step's polar factor is O(d^3)
        dim = min(np.shape(X)[1], np.shape(Y)[1], MAX_DIM)
    prep = prepare(X, Y, dim, normalize, rows_l2=rows_l2)
    A, B = prep.A, prep.B
    n1, d = A.shape
    n2 = B.shape[0]
    si, sj = check_seeds(seeds, n1, n2)
    cands = []  # (name, R0)
    for name in starts:
        t = time.perf_counter()
        if name == "profile":
            R0 = profile_start(A, B, sample, seed=seed)
        elif name == "identity":
            R0 = identity_start(prep)
        else:
            k = min(clusters, n1, n2)
            R0 = polar(cluster_start(A, B, k, restarts, 10_000, 4, seed)[0]) if k >= 2 else None
        if R0 is not None:
            cands.append((name, R0, time.perf_counter() - t))
    for r, p in enumerate(init or ()):
        p = np.asarray(p, np.int64)
        if p.shape != (n1,):
            raise AlignmentError(f"init assignment {r} has shape {p.shape}; expected ({n1},) (one Y row per X row)")
        ok = np.flatnonzero(p >= 0)
        if len(ok) >= 2:
            cands.append((f"init{r}", polar(seeded_cross_cov(A, B, ok, p[ok], (si, sj))), 0.0))
    if len(si):
        cands.append(("seeds", polar(A[si].T.astype(np.float64) @ B[sj].astype(np.float64)), 0.0))
    if not cands:
        raise AlignmentError("no start to refine: pass starts=... or init=[...]")
    runs = []
    for name, R0, t_start in cands:
        t = time.perf_counter()
        runs.append({"start": name, "start_score": round(assignment_score(A, B, R0, seed=seed), 5),
                     "seconds": round(t_start + time.perf_counter() - t, 3), "R": R0})
    # the starts with the best scores are refined (on the benchmark the right start always scored first or
    # second before refinement: CuPL disjoint raw axes 0.355 vs profile 0.292 and cluster 0.316)
    for r in sorted(runs, key=lambda r: -r["start_score"])[:max(1, refine_top)]:
        t = time.perf_counter()
        R0 = anneal_soft(A, B, r["R"], seed=seed) if soft else r["R"]
        r["R"], hist = refine(A, B, R0, rounds, batch, (si, sj), seed)
        r["score"] = round(assignment_score(A, B, r["R"], seed=seed), 5)
        r["rounds"] = len(hist)
        r["seconds"] = round(r["seconds"] + time.perf_counter() - t, 3)
    best = max((r for r in runs if "score" in r), key=lambda r: r["score"])
    R = best["R"]
    perm, _, cand = assign(A @ R, B, dense_max, 4, min(32, d), progress, force=(si, sj))
    mutual_rate, coupling = mutual_and_coupling(cand, n1, n2)
    info = {"method": "multistart", "n1": n1, "n2": n2, "dim": d, "chosen": best["start"],
            "candidates": [{k: v for k, v in r.items() if k != "R"} for r in runs],
            "assignment_score": best["score"], "mutual_rate": float(mutual_rate), "seeds": int(len(si)),
            "seconds": round(time.perf_counter() - t0, 3)}
    rot = rotation_from(prep, R, "multistart", 1.0, {**meta, "fit": {"multistart": {
        k: v for k, v in info.items() if k != "candidates"}}})
    return MatchResult(rot, perm, coupling, float(best["score"]), info)
