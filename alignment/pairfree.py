"""Pair-free matching: find the rotation between two embedding clouds without any pairs.

Given X (N1, D1) from one encoder and Y (N2, D2) from another, return a rotation mapping X's space into
Y's and a correspondence between rows, using no pairing information at all.

Two matchers share one result type (:class:`MatchResult`):

``match_pairfree`` (``method="ours"``): PCA sign search + mutual-neighbour Procrustes (ICP)
    1. Centre both clouds, scale each to unit total variance, and express each in its own principal axes
       (the shared dimension d = min(D1, D2) unless asked). When the spectrum is anisotropic with distinct
       eigenvalues, the rotation between the two PCA bases is close to a *signed identity*: only the signs
       of the axes are unknown (``pca`` already fixes them by skewness, which settles skewed data).
    2. Pick, on each side, the points with the largest whitened norm in the top ``sign_axes`` coordinates.
       The norm is invariant to rotations and sign flips, so both sides pick (mostly) the same points, and
       tail points are sparse, so nearest neighbours among them are discriminative.
    3. Score every sign pattern of the top ``sign_axes`` axes (2^8 by default) by the mean of the smallest
       half of the nearest-neighbour distances between the two subsets; keep the ``restarts`` best.
    4. For each kept pattern alternate matching (mutual nearest neighbours) and orthogonal Procrustes on the
       subsets, over a growing number of principal axes (8, 16, 32, ... d); score each result by the
       fraction of mutual nearest neighbours (a CSLS-style unsupervised criterion) and keep the best.
    5. Match all rows: linear_sum_assignment on the dense cost when N1 * N2 <= ``dense_max``; else candidates
       from a chunked neighbour search in the top ``candidate_dims`` axes, re-ranked in full dimension, then a
       greedy one-to-one assignment and Hungarian on the leftovers. Refit Procrustes on all matched pairs.
    Memory stays O((N1 + N2) d + chunk * N1): no N x N matrix above ``dense_max``.

``match_gw`` (``method="gw"``): POT's entropic Gromov-Wasserstein on the two distance matrices (the
reference baseline; O(N^2) memory and O(N^3)-ish time), then weighted Procrustes from the coupling.

Unequal N1, N2 and partial overlap are handled: the assignment is rectangular, and ``reject`` drops
matches whose distance is far above that of confident (mutual) matches (perm = -1).

Example
-------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> X = rng.standard_normal((500, 16)) * (np.arange(1, 17) ** -0.5)
>>> Q = np.linalg.qr(rng.standard_normal((16, 16)))[0]
>>> order = rng.permutation(500)
>>> res = match(X, (X @ Q)[order])
>>> float((order[res.perm] == np.arange(500)).mean())
1.0
"""
from __future__ import annotations

import itertools
import time

import numpy as np

from alignment._checks import blas_threads, in_parallel, work_threads
from alignment.errors import AlignmentError
from alignment.matching import (  # noqa: F401
    MatchResult,
    Prep,
    check_seeds,  # noqa: F401  (re-exported: it used to live here)
    cross_cov,
    prepare,
    rotation_from,
    weighted_procrustes,
)
from alignment.neighbours import (  # noqa: F401
    assign,
    knn,
    matmul_rows,
    mutual_and_coupling,
    mutual_neighbours,
    sqdist,
    sqnorm,
)
from alignment.procrustes import svd

# The matchers' answer version, raised whenever the same input can give another answer (2: auto's annealed
# fallback and held-out trust check; 3: the lattice factorisation made independent of the rows' order; 4: auto's
# fallback is the multistart matcher, chosen by the held-out assignment score; 5: the lattice matcher with cards
# estimated sets aside the rows of its omission-aware refit, alignment.lattice_cards.partial_rows).
# Cached pair-free maps and the tables built from them carry it in their keys
# (``captioner.rotations.key_params``, ``eval.world.table``), so an upgrade refits them instead of reading a
# stale answer.
MATCHER_VERSION = 5

# "auto" accepts the PCA/ICP answer outright when at least AUTO_SURE_MUTUAL of the rows (of the smaller side)
# are mutual nearest neighbours under its rotation and there are AUTO_SURE_ROWS_PER_DIM rows (of the smaller
# side) per dimension: with about as many rows as dimensions any rotation fits (Tux Paint, 369 captions in 368
# dimensions: a wrong answer with 0.99 mutual neighbours). Otherwise the multistart matcher runs.
AUTO_SURE_MUTUAL = 0.9
AUTO_SURE_ROWS_PER_DIM = 8


def residual(rotation, X, Y, sample: int = 2000, seed: int = 0) -> float:
    """Unsupervised fit of a rotation to two clouds (lower is better; comparable between rotations on the
    same X, Y): the mean of the smaller half of the squared distances from sampled Y rows to their nearest
    mapped X row, over the mean squared distance of Y rows to their mean. Trimming to the nearer half
    ignores rows with no partner (partial overlap)."""
    rng = np.random.default_rng(seed)
    X, Y = np.asarray(X, np.float32), np.asarray(Y, np.float32)
    xs = rng.permutation(len(X))[: 2 * sample]
    ys = rng.permutation(len(Y))[:sample]
    _, d2 = knn(Y[ys], rotation.transform(X[xs]).astype(np.float32), k=1)
    half = np.sort(d2[:, 0])[: max(1, len(ys) // 2)]
    yc = Y[ys] - Y.mean(0)
    return float(half.mean() / max(float((yc * yc).sum(1).mean()), 1e-30))


def _ours(X, Y, **kw):
    return match_pairfree(X, Y, **kw)


def _anneal(X, Y, **kw):
    from alignment.anneal import match_annealed

    first = match_pairfree(X, Y, **kw)
    keep = {k: v for k, v in kw.items() if k not in _OURS_ONLY or k in ("dense_max", "normalize")}
    return match_annealed(X, Y, [r["pattern"] for r in first.info["restarts"]], first.info["sign_axes"], **keep)


def _lazy(module: str, name: str):
    def call(X, Y, **kw):
        import importlib

        return getattr(importlib.import_module(module), name)(X, Y, **kw)
    return call


# The matchers by name: (function, one line for the CLI and the docs). ``match`` dispatches through it; the
# CLI's --matcher choices and the benchmarks read it. Adding a matcher is one entry here.
MATCHERS: dict[str, tuple] = {
    "auto": (None, "ours when its answer is unambiguous; else every start refined (multistart, with ours' "
                   "answer as one start), the best by the held-out assignment score"),
    "ours": (_ours, "PCA sign search + mutual-neighbour ICP: near-isomorphic clouds, scales to 1M points"),
    "multistart": (_lazy("alignment.starts", "match_multistart"),
                   "similarity-profile, raw-axes and cluster-QAP starts, each refined by Hungarian <-> "
                   "Procrustes, the best held-out assignment score wins: real encoders"),
    "rosetta": (_lazy("alignment.rosetta", "match_rosetta"),
                "the Rosetta paper's recipe: centre + row L2, k-means centres matched by CKA (QAP), "
                "averaged cross-covariances, Hungarian <-> Procrustes rounds"),
    "anneal": (_anneal, "annealed soft assignment from ours' sign patterns (high noise)"),
    "csls": (_lazy("alignment.csls", "match_csls"),
             "cluster-QAP starts in the top principal axes + CSLS self-learning (noisy or partly overlapping)"),
    "lattice": (_lazy("alignment.lattice", "match_lattice"),
                "different items sharing one attribute lattice (cards given, or estimated from each cloud)"),
    "wp": (_lazy("alignment.pairfree_baselines", "match_wp"), "coarse-to-fine Wasserstein-Procrustes"),
    "gw": (_lazy("alignment.pairfree_baselines", "match_gw"), "POT's entropic Gromov-Wasserstein (baseline)"),
}
_ALIASES = {"pairfree": "ours", "pca-icp": "ours", "wasserstein-procrustes": "wp", "entropic-gw": "gw"}


def match(X, Y, method: str = "auto", **kw) -> MatchResult:
    """Pair-free matching by name (see ``MATCHERS``).

    Parameters
    ----------
    X : (N1, D1), Y : (N2, D2) rows in any order, no pairs
    method : a name of ``MATCHERS``: "auto" (default), "ours", "multistart", "rosetta", "anneal", "csls",
        "lattice", "wp", "gw"
    **kw : go to the chosen matcher (for "auto": ``dim``, ``seed``, ``seeds``, ``progress`` and the metadata
        go to every matcher it runs)

    Returns
    -------
    MatchResult (rotation, perm (N1,), coupling, score, info)

    "auto" runs "ours"; when its answer is unambiguous (``AUTO_SURE_MUTUAL`` of the rows mutual nearest
    neighbours with ``AUTO_SURE_ROWS_PER_DIM`` rows per dimension) that is the answer. Otherwise it runs
    "multistart" (:func:`alignment.starts.match_multistart`) with ours' assignment as one more start: every
    start refined by Hungarian assignment <-> Procrustes, the best held-out assignment score
    (:func:`alignment.rosetta.assignment_score`) wins; ``info["auto"]`` records the candidates.
    """
    name = _ALIASES.get(method, method)
    if name not in MATCHERS:
        raise AlignmentError(f"unknown pair-free method {method!r}; known: {', '.join(MATCHERS)}")
    if name == "auto":
        return _match_auto(X, Y, **kw)
    return MATCHERS[name][0](X, Y, **kw)


def _match_auto(X, Y, **kw) -> MatchResult:
    """"auto" of :func:`match`: ours, then (unless ours is unambiguous) multistart with ours' answer as a start."""
    from alignment.starts import match_multistart

    first = match_pairfree(X, Y, **kw)
    rows_per_dim = min(first.info["n1"], first.info["n2"]) / max(1, first.info["dim"])
    if first.score >= AUTO_SURE_MUTUAL and rows_per_dim >= AUTO_SURE_ROWS_PER_DIM:
        first.info["auto"] = {"chosen": "ours", "ours_mutual": round(first.score, 4), "ran": ["ours"]}
        return first
    shared = {k: v for k, v in kw.items() if k not in _OURS_ONLY or k in ("seeds", "dense_max", "normalize")}
    inits, names = [first.perm], {"init0": "ours"}
    if kw.get("seeds") is None and first.info["dim"] <= AUTO_ANNEAL_MAX_DIM:
        # noisy near-isomorphic clouds: the annealed assignment is the start that works
        from alignment.anneal import match_annealed

        meta = {k: v for k, v in kw.items() if k not in _OURS_ONLY and k not in ("dim", "seed", "progress")}
        ann = match_annealed(X, Y, [r["pattern"] for r in first.info["restarts"]], first.info["sign_axes"],
                             dim=kw.get("dim"), normalize=kw.get("normalize", True),
                             dense_max=kw.get("dense_max", 5_000_000), progress=kw.get("progress", False), **meta)
        inits.append(ann.perm)
        names["init1"] = "anneal"
    best = match_multistart(X, Y, starts=AUTO_STARTS, init=inits, **shared)
    best.info["auto"] = {"chosen": names.get(best.info["chosen"], best.info["chosen"]),
                         "ours_mutual": round(first.score, 4),
                         "ran": ["ours", *[v for k, v in names.items() if k != "init0"], "multistart"],
                         "start_score": {names.get(c["start"], c["start"]): c["start_score"]
                                         for c in best.info["candidates"]},
                         "assignment_score": {names.get(c["start"], c["start"]): c["score"]
                                              for c in best.info["candidates"] if "score" in c}}
    return best


# "auto" anneals from ours' sign patterns only up to this shared dimension: the noisy synthetic problems it
# solves are d = 32-128 (N=2000, d=128, noise 1.5 / 50 % overlap: 94 % right, 28 s), while on real encoders
# (CuPL, 3,000 a side, d = 384) it took 137 s and never gave the best start
AUTO_ANNEAL_MAX_DIM = 128

# the built-in starts "auto" refines beside ours' and the annealed answers (the cluster-QAP start never won on
# the real-data benchmark and costs the most; it stays in "multistart" and "rosetta")
AUTO_STARTS = ("profile", "identity")


_OURS_ONLY = {"sign_axes", "restarts", "subset", "iters", "reject", "candidates", "candidate_dims", "normalize",
              "fit_scale", "seeds", "seed_weight", "dense_max", "search", "device"}


# ----------------------------------------------------------------------------------------------- ours
def match_pairfree(X, Y, dim: int | None = None, sign_axes: int = 8, restarts: int = 4, subset: int = 2000,
                   iters: int = 2, reject: float | None = None, dense_max: int = 5_000_000,
                   candidates: int = 4, candidate_dims: int = 32, normalize: bool = True, fit_scale: bool = False,
                   seeds=None, seed_weight: float = 10.0, seed: int = 0, progress: bool = False,
                   search: str = "auto", device=None, **meta) -> MatchResult:
    """Long: its parameters and their documentation are most of it; the steps are ``_sign_search``,
    ``_refine`` and the assignment of ``alignment.neighbours``.

    Pair-free rotation and correspondence by PCA sign search and mutual-neighbour Procrustes.

    Parameters
    ----------
    X : (N1, D1) ; Y : (N2, D2), rows in any order, no pairs
    dim : shared dimension (default min(D1, D2, N1 - 1, N2 - 1))
    sign_axes : number of top principal axes whose signs are searched exhaustively (2^sign_axes patterns)
    restarts : how many of the best sign patterns are refined; the best by mutual-NN rate wins
    subset : rows per side used for the search and refinement (the largest whitened norms; X side 2x)
    iters : matching/Procrustes rounds per dimension stage
    reject : if set, unmatch pairs whose distance exceeds ``reject`` x the median distance of mutual pairs
        (for partial overlap); None matches every row of the smaller side
    dense_max : largest N1 * N2 solved by a dense linear_sum_assignment; above, sparse candidates (faster
        from about 2,000 rows per side on)
    candidates, candidate_dims : candidates per Y row and the dimensions they are searched in (large N)
    normalize : scale each cloud to unit total variance before matching (different encoders' scales)
    fit_scale : refit the global scale by Procrustes on the final pairs (else the ratio of total variances)
    seeds : optional known or pseudo pairs [(i, j), ...] (row i of X matches row j of Y); they enter every
        Procrustes fit with weight ``seed_weight`` each (a matched pair weighs 1) and are kept in the answer
    seed : unused (the search is deterministic); accepted so that every matcher takes the same arguments
    search : candidate search above ``dense_max``: "exact", "ivf" (k-means cells, approximate) or "auto"
        (IVF above ``alignment.neighbours.IVF_FROM`` pairs on CPU)
    device : torch device for the candidate search (e.g. "cuda"; default CPU)
    **meta : stored in the rotation's metadata (encoders, datasets)

    Returns
    -------
    MatchResult
    """
    t0 = time.perf_counter()
    timings = {}
    threads = work_threads()  # for the large products: what the CPUs free now allow (one on a busy machine)
    prep = prepare(X, Y, dim, normalize, threads=threads)
    A, B = prep.A, prep.B
    n1, d = A.shape
    n2 = B.shape[0]
    si, sj = check_seeds(seeds, n1, n2)
    sw = float(seed_weight)
    timings["prepare_s"] = time.perf_counter() - t0

    # 2. rotation-invariant subsets: largest whitened norms in the top-k axes (sign- and rotation-blind)
    k = max(1, min(sign_axes, d))
    Aw = A[:, :k] / np.sqrt(prep.var_a[:k] + 1e-12).astype(np.float32)
    Bw = B[:, :k] / np.sqrt(prep.var_b[:k] + 1e-12).astype(np.float32)
    ny_sub = min(n2, subset)
    nx_sub = min(n1, 2 * subset)
    ys = np.argsort(-sqnorm(Bw), kind="stable")[:ny_sub]
    xs = np.argsort(-sqnorm(Aw), kind="stable")[:nx_sub]

    # 3-4. sign search and refinement on the subsets. Small products: one BLAS thread is much faster here
    # than several (thread wake-ups dominate, far worse on a busy machine).
    t = time.perf_counter()
    with blas_threads(1):
        # a few hundred queries rank the patterns; their partners sit among the largest norms of X
        patterns, scores = _sign_search(Aw[xs[: min(nx_sub, 1536)]], Bw[ys[: min(ny_sub, 384)]], threads)
        timings["sign_search_s"] = time.perf_counter() - t
        t = time.perf_counter()
        tried = _refine(A[xs], B[ys], Aw[xs], Bw[ys], patterns, scores, restarts, iters, (A[si], B[sj], sw),
                        threads)
    best = max(tried, key=lambda r: r["mutual"])
    R = best["R"]
    timings["refine_s"] = time.perf_counter() - t

    # 5. match every row, refit on all pairs (seeds forced and weighted); when the subset's answer was not
    # already unambiguous, match again (large N: re-rank the same candidates)
    t = time.perf_counter()
    where = {"search": search, "device": device, "threads": threads}
    AR = matmul_rows(A, R, threads)
    perm, dist, cand = assign(AR, B, dense_max, candidates, candidate_dims, progress, force=(si, sj), **where)
    ok = perm >= 0 if reject is None else cand["mutual_mask"]  # partial overlap: refit on confident pairs
    if ok.sum() >= 2:
        with blas_threads(threads):
            M = cross_cov(A, B, perm, ok)  # in row blocks: no copy of the matched rows
        with blas_threads(1):
            R = _procrustes_seeded(None, None, (A[si], B[sj], sw), M=M)
    if best["mutual"] < 0.98:
        AR = matmul_rows(A, R, threads)
        perm, dist, cand = assign(AR, B, dense_max, candidates, candidate_dims, progress, force=(si, sj),
                                   y_idx=cand["y_idx"] if n1 * n2 > dense_max else None, **where)
    timings["assign_s"] = time.perf_counter() - t

    # unsupervised scores on all rows: mutual nearest neighbours, and the ratio test (nearest X of a Y row
    # at under half the distance of the second nearest)
    mutual_rate, coupling = mutual_and_coupling(cand, n1, n2)
    yd = cand["y_d2"]
    confident = float((yd[:, 0] < 0.25 * yd[:, 1]).sum() / min(n1, n2)) if yd.shape[1] > 1 else float("nan")
    ok = perm >= 0
    rejected = 0
    if reject is not None and ok.any():
        conf = cand["mutual_mask"]  # X rows whose assignment is a mutual nearest neighbour
        ref = np.median(dist[ok & conf]) if (ok & conf).any() else np.median(dist[ok])
        bad = ok & (dist > reject * ref)
        rejected = int(bad.sum())
        perm = np.where(bad, -1, perm)
        ok = perm >= 0
    s_fit = 1.0
    if fit_scale and ok.sum() >= 2:
        AR = A[ok] @ R
        s_fit = float((AR * B[perm[ok]]).sum() / max((AR * AR).sum(), 1e-30))
    info = {
        "method": "ours", "n1": n1, "n2": n2, "dim": d, "sign_axes": k, "subset": [int(nx_sub), int(ny_sub)],
        "restarts": [{kk: v for kk, v in r.items() if kk != "R"} for r in tried],
        "mutual_rate": float(mutual_rate), "confident": min(confident, 1.0), "matched": int(ok.sum()),
        "seeds": int(len(si)),
        "rejected": rejected,
        "timings": {kk: round(v, 3) for kk, v in timings.items()}, "seconds": round(time.perf_counter() - t0, 3),
    }
    rot = rotation_from(prep, R, "pairfree", s_fit, {**meta, "fit": {"pairfree": {
        kk: v for kk, v in info.items() if kk not in ("restarts",)}}})
    return MatchResult(rot, perm, coupling, float(mutual_rate), info)


def _sign_search(Ar, Bq, threads: int = 1):
    """Score every sign pattern of the k whitened axes: mean of the smaller half of the nearest-neighbour
    squared distances from the sign-flipped queries Bq (q, k) to the references Ar (r, k). The patterns
    are split between ``threads`` Python threads (each pattern's work is the same either way).

    Returns patterns (2^k, k) and scores (2^k,), lower is better."""
    k = Ar.shape[1]
    if k > 12:
        raise AlignmentError(f"sign_axes={k}: the exhaustive sign search (2^{k} patterns) is too large; use <= 12")
    patterns = np.array(list(itertools.product((1.0, -1.0), repeat=k)), np.float32)
    an = sqnorm(Ar)[None, :]
    bn = sqnorm(Bq)
    half = max(1, len(Bq) // 2)
    scores = np.empty(len(patterns))
    last = len(patterns) - 1

    def score(ps):
        for p in ps:  # pattern last - p is pattern p negated: its products are -G
            G2 = -2.0 * ((Bq * patterns[p]) @ Ar.T)  # (q, r)
            for q, D in ((p, an + G2), (last - p, an - G2)):  # squared distances less |Bq|^2, added after
                d = D.min(1) + bn
                scores[q] = np.partition(d, half - 1)[:half].mean()

    pairs = np.arange(len(patterns) // 2)
    in_parallel([lambda ps=ps: score(ps) for ps in np.array_split(pairs, max(1, threads))], threads)
    return patterns, scores


def _refine(As, Bs, Aws, Bws, patterns, scores, restarts, iters, seeded, threads: int = 1):
    """ICP from the best sign patterns: mutual nearest neighbours <-> Procrustes, over the top m axes for
    m = 2k, 4k, ... d. As (nx, d), Bs (ny, d) subsets; Aws, Bws their whitened top-k coordinates; ``seeded``
    (A rows, B rows, weight) of the known pairs; ``threads``: Python threads for the mutual neighbours.
    Once a stage finds 98% mutual neighbours the remaining stages jump to the full dimension, and a stage
    stops when its pairs stop changing.

    Returns a list of {"pattern", "sign_score", "mutual", "R" (d, d), "stages"} per restart tried."""
    k, d = Aws.shape[1], As.shape[1]
    tried = []
    for p in np.argsort(scores)[:max(1, restarts)]:
        sgn = patterns[p]
        qi, ri, _, frac = mutual_neighbours(Bws * sgn, Aws, threads)  # first pairs from the sign pattern alone
        R, hist, m = None, [], k
        while m < d:
            m = d if frac >= 0.98 else min(2 * m, d)
            for _ in range(iters):
                if len(qi) < 2:
                    break
                R = _procrustes_seeded(As[ri, :m], Bs[qi, :m], seeded, m)
                prev = (len(qi), frac)
                qi, ri, _, frac = mutual_neighbours(Bs[:, :m], matmul_rows(As[:, :m], R, threads), threads)
                if (len(qi), frac) == prev:
                    break
            hist.append((m, round(float(frac), 4)))
        if R is None or R.shape[0] != d:  # d == k, or too few pairs: the signed identity itself
            R = np.eye(d, dtype=np.float32)
            R[:k, :k] = np.diag(sgn)
            _, _, _, frac = mutual_neighbours(Bs, As @ R)
        tried.append({"pattern": int(p), "sign_score": float(scores[p]), "mutual": float(frac), "R": R,
                      "stages": hist})
        if frac > 0.9:  # unambiguous: the other restarts cannot beat it by much
            break
    return tried


def _procrustes_seeded(A, B, seeded, m=None, M=None):
    """Procrustes on matched rows plus the known pairs (each weighing ``w``), in the top m axes; ``M``: the
    matched rows' A^T B when already summed (then A, B are not used)."""
    sa, sb, w = seeded
    M = A.T @ B if M is None else M
    if len(sa):
        sa, sb = (sa, sb) if m is None else (sa[:, :m], sb[:, :m])
        M = M + w * (sa.T @ sb)
    U, _, Vt = svd(M.astype(np.float64))
    return (U @ Vt).astype(np.float32)
