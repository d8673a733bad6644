"""Pair-free matching for the hard cases: cluster-level QAP starts, restarts, and self-learning refinement.

The cheap matcher (:func:`alignment.pairfree.match_pairfree`) finds the rotation when the PCA axes of the two
clouds nearly agree; with strong noise or partial overlap it stops in a wrong basin. This module follows the
recipe of "Shared Geometry as a Rosetta Stone" (Schnaus et al. 2026: cluster-level quadratic assignment as
the start, many restarts) and of VecMap's self-learning (Artetxe et al. 2018: alternate a dictionary and an
orthogonal map, with CSLS and stochastic dictionary induction), written from the papers' descriptions:

1. **Starts.** For each of ``restarts`` bootstrap draws (a random ``bootstrap`` fraction of each side's rows),
   k-means with ``clusters`` centroids on each side in the top ``cluster_dims`` principal axes; the two
   centroid Gram matrices (rotation-invariant) are matched by QAP (:func:`alignment.qap.match_classes`),
   Procrustes on the matched centroids gives a rotation of the top axes, and one assignment in those axes
   plus a Procrustes refit in full dimension gives a rotation of the whole space. Callers may add starts of
   their own (``init``: assignments found by another matcher, e.g. the cheap one).
2. **Choice of starts.** Every start is scored by :func:`heldout_score` and the best ``refine_top`` refined.
3. **Refinement.** Repeat ``iters`` times: one-to-one assignment under the current rotation (Hungarian, or
   the sparse candidate assignment above ``dense_max`` cells); rank its pairs by CSLS (Conneau et al. 2018:
   2 d(i, j) - r_x(i) - r_y(j) with r the mean squared distance to the ``csls_k`` nearest of the other side,
   which removes hubs) and keep the best fraction q, q rising linearly from ``q_start`` to ``q_end``; keep
   each of those with probability p rising from ``keep_start`` to 1 (stochastic dictionary induction: the
   dictionary is shaken early so that the map can leave the start's basin); refit Procrustes on the kept
   pairs plus the known pairs (``seeds``, weight ``seed_weight`` each). The iterate with the best
   held-out score is returned.

:func:`heldout_score` is the unsupervised criterion: split X's rows in two folds, fit Procrustes on one
fold's assigned pairs and count, on the other fold, the rows whose CSLS nearest neighbour in Y is mutual.
Scoring on rows the rotation was not fitted on matters: a rotation refitted on a wrong assignment makes that
same assignment look mutual (in-sample mutual rates were higher for a 26%-correct answer than for the true
rotation on the noise 1.5 / 50% overlap bench problem), while held out it scores far lower.
"""
from __future__ import annotations

import time

import numpy as np

from alignment._checks import blas_threads
from alignment.errors import AlignmentError
from alignment.matching import MatchResult, check_seeds, prepare, rotation_from, weighted_procrustes
from alignment.neighbours import assign, knn, mutual_and_coupling
from alignment.procrustes import svd


def kmeans(Z, k: int, rng, iters: int = 25):
    """Lloyd's k-means from a k-means++ start. Returns (labels (n,), centroids (k, m))."""
    n = len(Z)
    C = np.empty((k, Z.shape[1]), np.float32)
    C[0] = Z[rng.integers(n)]
    d2 = ((Z - C[0]) ** 2).sum(1)
    for c in range(1, k):
        C[c] = Z[rng.choice(n, p=d2 / d2.sum()) if d2.sum() > 0 else rng.integers(n)]
        d2 = np.minimum(d2, ((Z - C[c]) ** 2).sum(1))
    lab = np.zeros(n, np.int64)
    for _ in range(iters):
        D = (Z * Z).sum(1)[:, None] + (C * C).sum(1)[None] - 2 * Z @ C.T
        new = D.argmin(1)
        for c in range(k):
            rows = Z[new == c]
            C[c] = rows.mean(0) if len(rows) else Z[D[:, c].argmin()]
        if (new == lab).all():
            break
        lab = new
    return lab, C


def cluster_starts(A, B, clusters: int = 16, cluster_dims: int = 8, restarts: int = 8, bootstrap: float = 0.8,
                   seed: int = 0):
    """Rotations of the top ``cluster_dims`` axes from k-means centroids matched by QAP, one per bootstrap
    restart. A (N1, d), B (N2, d) in their principal axes. Returns a list of (m, m) rotations."""
    from alignment.qap import match_classes

    rng = np.random.default_rng(seed)
    m = min(cluster_dims, A.shape[1])
    out = []
    for _ in range(max(1, restarts)):
        xa = rng.permutation(len(A))[: max(clusters, int(bootstrap * len(A)))]
        yb = rng.permutation(len(B))[: max(clusters, int(bootstrap * len(B)))]
        la, Ca = kmeans(A[xa, :m], clusters, rng)
        lb, Cb = kmeans(B[yb, :m], clusters, rng)
        perm = match_classes(Ca @ Ca.T, Cb @ Cb.T, method="faq", restarts=4, seed=int(rng.integers(1 << 30)))
        w = np.sqrt(np.bincount(la, minlength=clusters) * np.bincount(lb, minlength=clusters)[perm])
        out.append(weighted_procrustes(Ca, Cb[perm], w.astype(np.float32)))
    return out


def _csls_of_pairs(AR, B, xi, yj, k: int):
    """CSLS cost 2 d(i, j) - r_x(i) - r_y(j) of the pairs (xi, yj) (lower is more confident)."""
    _, dx = knn(AR[xi], B, k=k)
    _, dy = knn(B[yj], AR, k=k)
    d = ((AR[xi] - B[yj]) ** 2).sum(1)
    return 2 * d - dx.mean(1) - dy.mean(1)


def _mutual_csls_rate(Q, B, rows_q, k: int) -> float:
    """Fraction of the query rows Q whose CSLS-nearest row of B has them as its CSLS-nearest query."""
    kk = min(k + 1, len(B), len(Q))
    iq, dq = knn(Q, B, k=kk)
    ib, db = knn(B, Q, k=kk)
    rq, rb = dq[:, :k].mean(1), db[:, :k].mean(1)
    # each query's best B under CSLS among its candidates, and each B row's best query
    cq = 2 * dq - rb[iq]
    fq = iq[np.arange(len(Q)), cq.argmin(1)]
    cb = 2 * db - rq[ib]
    fb = ib[np.arange(len(B)), cb.argmin(1)]
    return float((fb[fq] == np.arange(len(Q))).sum() / max(len(rows_q), 1))


def heldout_score(A, B, perm, k: int = 10, sample: int = 4000, seed: int = 0) -> float:
    """Unsupervised quality of an assignment ``perm`` (X row -> Y row, -1 unmatched) between A and B (in
    their principal axes): two folds of X's rows; each fold is mapped by the Procrustes fit on the other
    fold's assigned pairs, and the score is the mutual-CSLS rate of all mapped rows against Y.
    Higher is better; the true rotation of a noisy problem scores well above a wrong one (see module doc)."""
    rng = np.random.default_rng(seed)
    rows = rng.permutation(len(A))[:sample]
    fold = np.arange(len(rows)) % 2
    ys = rng.permutation(len(B))[:sample]
    Q = np.empty((len(rows), A.shape[1]), np.float32)
    for f in (0, 1):
        fit = rows[(fold == f) & (perm[rows] >= 0)]
        if len(fit) < 2:
            return 0.0
        with blas_threads(1):
            R = weighted_procrustes(A[fit], B[perm[fit]])
        Q[fold != f] = A[rows[fold != f]] @ R
    return _mutual_csls_rate(Q, B[ys], rows, k)


def _refine(A, B, R, seeded, iters, q_start, q_end, keep_start, csls_k, dense_max, rng, progress=False,
            patience: int = 4):
    """Long: the self-learning loop of the module doc, step 3; returns (best R, its perm, its score, history).

    ``seeded`` = (x rows, y rows, weight) of the known pairs; the loop stops when ``patience`` held-out
    checks (every third round) in a row found nothing better."""
    si, sj, sw = seeded
    best = (None, None, -1.0)
    hist = []
    prev = None
    for it in range(iters):
        t = it / max(iters - 1, 1)
        perm, _, _ = assign(A @ R, B, dense_max, 4, 32, progress, force=(si, sj))
        if it % 3 == 0 or it == iters - 1:
            s = heldout_score(A, B, perm, csls_k)
            hist.append((it, round(s, 4)))
            if s > best[2]:
                best = (R, perm, s)
            elif len(hist) - 1 - max(range(len(hist)), key=lambda h: hist[h][1]) >= patience:
                break  # no better held-out score in ``patience`` checks: this start's basin is exhausted
        if prev is not None and (perm == prev).mean() > 0.999 and t > 0.5:
            break
        prev = perm
        xi = np.flatnonzero(perm >= 0)
        c = _csls_of_pairs(A @ R, B, xi, perm[xi], csls_k)
        q = q_start + (q_end - q_start) * t
        sel = xi[np.argsort(c)[: max(2, int(q * len(xi)))]]
        p = keep_start + (1.0 - keep_start) * t
        sel = sel[rng.random(len(sel)) < p]
        with blas_threads(1):
            M = A[sel].T @ B[perm[sel]]
            if len(si):
                M = M + sw * (A[si].T @ B[sj])
            R = _rot(M)
    return best[0], best[1], best[2], hist


def _rot(M):
    U, _, Vt = svd(np.asarray(M, np.float64))
    return (U @ Vt).astype(np.float32)


def match_csls(X, Y, dim: int | None = None, clusters: int = 16, cluster_dims: int = 8, restarts: int = 4,
                  bootstrap: float = 0.8, refine_top: int = 1, iters: int = 30, q_start: float = 0.1,
                  q_end: float = 1.0, keep_start: float = 0.8, csls_k: int = 10, init=None, seeds=None,
                  seed_weight: float = 10.0, dense_max: int = 5_000_000, normalize: bool = True, seed: int = 0,
                  progress: bool = False, **meta) -> MatchResult:
    """Long: parameters and their documentation; the steps are the module doc's.

    Pair-free rotation and correspondence by cluster-level QAP starts and CSLS self-learning.

    Parameters
    ----------
    X : (N1, D1) ; Y : (N2, D2), rows in any order, no pairs
    dim : shared dimension (default min(D1, D2, N1 - 1, N2 - 1))
    clusters, cluster_dims : k-means centroids per side and the principal axes they are computed in
    restarts, bootstrap : bootstrap draws of the cluster start, and the fraction of rows each draws
    refine_top : how many of the best-scoring starts are refined
    iters, q_start, q_end, keep_start, csls_k : the refinement (module doc, step 3)
    init : optional list of assignments (N1,) from other matchers (X row -> Y row, -1 none), used as starts
    seeds, seed_weight : known or pseudo pairs [(i, j), ...], weighted into every Procrustes fit and kept
    dense_max : largest N1 * N2 assigned by a dense Hungarian; above, sparse candidates

    Returns
    -------
    MatchResult whose ``score`` is :func:`heldout_score` of the answer
    """
    t0 = time.perf_counter()
    prep = prepare(X, Y, dim, normalize)
    A, B = prep.A, prep.B
    n1, d = A.shape
    n2 = B.shape[0]
    if clusters < 2 or clusters > min(n1, n2):
        raise AlignmentError(f"clusters={clusters} must be between 2 and the smaller cloud's {min(n1, n2)} rows")
    si, sj = check_seeds(seeds, n1, n2)
    seeded = (si, sj, float(seed_weight))
    rng = np.random.default_rng(seed)
    m = min(cluster_dims, d)
    starts = []  # (name, perm)
    for r, Rm in enumerate(cluster_starts(A, B, clusters, m, restarts, bootstrap, seed)):
        starts.append((f"cluster{r}", assign(A[:, :m] @ Rm, B[:, :m], dense_max, 4, min(32, m), False,
                                              force=(si, sj))[0]))
    for r, p in enumerate(init or ()):
        p = np.asarray(p, np.int64)
        if p.shape != (n1,):
            raise AlignmentError(f"init assignment {r} has shape {p.shape}; expected ({n1},) (one Y row per X row)")
        starts.append((f"init{r}", p))
    scored = sorted(((heldout_score(A, B, p, csls_k), name, p) for name, p in starts), key=lambda v: -v[0])
    t_starts = time.perf_counter() - t0
    runs = []
    for s0, name, p in scored[: max(1, refine_top)]:
        ok = p >= 0
        with blas_threads(1):
            M = A[ok].T @ B[p[ok]] + (seeded[2] * (A[si].T @ B[sj]) if len(si) else 0.0)
        R, perm, s, hist = _refine(A, B, _rot(M), seeded, iters, q_start, q_end, keep_start, csls_k, dense_max,
                                   rng, progress)
        if s0 > s:  # the start itself scored better than every iterate
            R, perm, s = _rot(M), p, s0
        runs.append({"start": name, "start_score": round(s0, 4), "score": round(s, 4), "history": hist,
                     "R": R, "perm": perm})
    best = max(runs, key=lambda r: r["score"])
    R = best["R"]
    perm, _, cand = assign(A @ R, B, dense_max, 4, 32, progress, force=(si, sj))
    mutual_rate, coupling = mutual_and_coupling(cand, n1, n2)
    info = {"method": "csls", "n1": n1, "n2": n2, "dim": d, "clusters": clusters, "cluster_dims": m,
            "starts": [{"start": nm, "score": round(s, 4)} for s, nm, _ in scored],
            "starts_by_name": {nm: round(s, 4) for s, nm, _ in scored},
            "runs": [{k: v for k, v in r.items() if k not in ("R", "perm")} for r in runs],
            "heldout_score": best["score"], "mutual_rate": float(mutual_rate), "seeds": int(len(si)),
            "timings": {"starts_s": round(t_starts, 3)}, "seconds": round(time.perf_counter() - t0, 3)}
    rot = rotation_from(prep, R, "csls", 1.0, {**meta, "fit": {"csls": {
        k: v for k, v in info.items() if k not in ("runs", "starts")}}})
    return MatchResult(rot, perm, coupling, float(best["score"]), info)


