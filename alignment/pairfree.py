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
from dataclasses import dataclass, field

import numpy as np

from alignment._checks import as_matrix, blas_threads
from alignment.errors import AlignmentError
from alignment.procrustes import Rotation, _svd, pca


@dataclass
class MatchResult:
    """What a pair-free matcher returns.

    Attributes
    ----------
    rotation : Rotation mapping X's space (D1) into Y's (D2); ``rotation.transform(X[i]) ~ Y[perm[i]]``
    perm : (N1,) int64, the row of Y matched to row i of X, or -1 when unmatched (N1 > N2, rejected)
    coupling : (N1, N2) soft correspondence: scipy.sparse CSR over each Y row's candidates (ours) or the
        dense transport plan (GW); rows need not sum to one
    score : unsupervised quality, the fraction of mutual nearest neighbours under the rotation (0..1)
    info : timings, stage scores, parameters
    """

    rotation: Rotation
    perm: np.ndarray
    coupling: object = None
    score: float = float("nan")
    info: dict = field(default_factory=dict)

    def accuracy(self, true_perm) -> float:
        """Fraction of X rows matched to their true Y row (``true_perm[i]``; -1 entries are ignored)."""
        t = np.asarray(true_perm)
        ok = t >= 0
        return float((self.perm[ok] == t[ok]).mean()) if ok.any() else float("nan")


# "auto" trusts the PCA/ICP answer when at least this fraction of rows (of the smaller side) has a match
# at under half the distance of its runner-up; exact copies score ~1, unrelated or real-encoder clouds ~0
AUTO_MIN_CONFIDENT = 0.25


def match(X, Y, method: str = "auto", **kw) -> MatchResult:
    """Pair-free matching by name.

    "ours" (:func:`match_pairfree`, near-isomorphic clouds, scales to large N), "wp" (:func:`match_wp`,
    loosely isomorphic clouds such as two real encoders), "gw" (:func:`match_gw`, POT baseline), or "auto":
    run "ours" and, when fewer than ``AUTO_MIN_CONFIDENT`` of the rows pass the ratio test
    (``info["confident"]``: nearest match at under half the distance of the runner-up), fall back to "wp"
    (``info["auto"]`` records the choice). Keyword arguments go to the chosen matcher
    (for "auto": ``dim``, ``seed``, ``progress`` and the metadata go to both).
    """
    if method == "auto":
        first = match_pairfree(X, Y, **kw)
        if first.info["confident"] >= AUTO_MIN_CONFIDENT:
            first.info["auto"] = {"chosen": "ours", "ours_confident": first.info["confident"]}
            return first
        shared = {k: v for k, v in kw.items() if k not in _OURS_ONLY}
        if shared.get("dim") is None:  # wp's own default (32): its search does not scale to hundreds of axes
            shared.pop("dim", None)
        second = match_wp(X, Y, **shared)
        second.info["auto"] = {"chosen": "wp", "ours_confident": first.info["confident"],
                               "threshold": AUTO_MIN_CONFIDENT}
        return second
    if method in ("ours", "pairfree", "pca-icp"):
        return match_pairfree(X, Y, **kw)
    if method in ("wp", "wasserstein-procrustes"):
        return match_wp(X, Y, **kw)
    if method in ("gw", "entropic-gw"):
        return match_gw(X, Y, **kw)
    raise AlignmentError(f"unknown pair-free method {method!r}; use 'auto', 'ours', 'wp' or 'gw'")


_OURS_ONLY = {"sign_axes", "restarts", "subset", "iters", "reject", "candidates", "candidate_dims", "normalize",
              "fit_scale"}


# ----------------------------------------------------------------------------------------------- shared steps
@dataclass
class _Prep:
    A: np.ndarray  # (N1, d) X in its own principal axes, unit total variance
    B: np.ndarray  # (N2, d)
    var_a: np.ndarray  # (d,)
    var_b: np.ndarray
    mx: np.ndarray
    my: np.ndarray
    Vx: np.ndarray  # (D1, d)
    Vy: np.ndarray  # (D2, d)
    sx: float  # total standard deviation removed from X
    sy: float


def _prepare(X, Y, dim, normalize=True, rows_l2=False) -> _Prep:
    X = as_matrix(X, "X", min_rows=3)
    Y = as_matrix(Y, "Y", min_rows=3)
    n1, D1 = X.shape
    n2, D2 = Y.shape
    d = min(D1, D2) if dim is None else int(dim)
    if d < 1 or d > min(D1, D2):
        raise AlignmentError(f"dim={dim} must be between 1 and min(D1, D2) = {min(D1, D2)}")
    d = min(d, n1 - 1, n2 - 1)
    dt = np.float32
    mx = X.mean(0, dtype=np.float64)
    my = Y.mean(0, dtype=np.float64)
    Xc = (X - mx).astype(dt)
    Yc = (Y - my).astype(dt)
    if rows_l2:  # cosine geometry (what retrieval and the metrics use); the stored scale uses the mean norm
        nx_, ny_ = np.linalg.norm(Xc, axis=1, keepdims=True), np.linalg.norm(Yc, axis=1, keepdims=True)
        rx, ry = float(nx_.mean()), float(ny_.mean())
        Xc /= np.maximum(nx_, 1e-12)
        Yc /= np.maximum(ny_, 1e-12)
    sx = float(np.sqrt(np.einsum("ij,ij->", Xc, Xc, dtype=np.float64) / n1)) if normalize else 1.0
    sy = float(np.sqrt(np.einsum("ij,ij->", Yc, Yc, dtype=np.float64) / n2)) if normalize else 1.0
    if sx == 0 or sy == 0:
        raise AlignmentError("X or Y has zero variance; nothing to match")
    Xc /= sx
    Yc /= sy
    if rows_l2:
        sx, sy = sx * rx, sy * ry
    Vx, va = pca(Xc, d)
    Vy, vb = pca(Yc, d)
    return _Prep(np.ascontiguousarray(Xc @ Vx), np.ascontiguousarray(Yc @ Vy), va, vb, mx, my, Vx, Vy, sx, sy)


def _rotation_from(prep: _Prep, R: np.ndarray, method: str, scale_fit: float = 1.0, meta=None) -> Rotation:
    """Wrap a (d, d) rotation between the PCA bases as a map from X's raw space to Y's raw space."""
    s = prep.sy / prep.sx * scale_fit
    Vx, Vy = prep.Vx.astype(np.float32), prep.Vy.astype(np.float32)
    if Vx.shape[0] == Vx.shape[1] and Vy.shape[0] == Vy.shape[1]:  # square bases: fold them into R
        return Rotation(method, prep.mx.astype(np.float32), prep.my.astype(np.float32),
                        (Vx @ R.astype(np.float32) @ Vy.T), None, None, float(s), meta or {})
    return Rotation(method, prep.mx.astype(np.float32), prep.my.astype(np.float32), R.astype(np.float32),
                    Vx, Vy, float(s), meta or {})


def _procrustes(A, B, w=None):
    """R (m, m) orthogonal minimising sum_i w_i ||A_i R - B_i||^2 (rows already paired)."""
    M = (A.T * w) @ B if w is not None else A.T @ B
    U, _, Vt = _svd(M.astype(np.float64))
    return (U @ Vt).astype(np.float32)


def _sqnorm(A):
    return np.einsum("ij,ij->i", A, A)


def knn(Q, K, k: int = 1, chunk: int = 1024, progress: bool = False, desc: str = "neighbours"):
    """Exact k nearest neighbours (squared Euclidean) of each row of Q among the rows of K, in chunks.

    Parameters
    ----------
    Q : (Nq, m), K : (Nk, m) float arrays
    k : neighbours per query (<= Nk)
    chunk : query rows per block; memory is about chunk * Nk floats

    Returns
    -------
    idx : (Nq, k) int64 sorted by distance; d2 : (Nq, k) float32 squared distances
    """
    import torch  # its addmm + topk are several times faster than numpy's matmul + argpartition here

    k = min(k, K.shape[0])
    Kt = torch.from_numpy(np.ascontiguousarray(K, dtype=np.float32))
    kn = (Kt * Kt).sum(1)[None, :]
    idx = np.empty((Q.shape[0], k), np.int64)
    d2 = np.empty((Q.shape[0], k), np.float32)
    it = range(0, Q.shape[0], chunk)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc=desc, unit="chunk", leave=False)
    for s in it:
        q = torch.from_numpy(np.ascontiguousarray(Q[s:s + chunk], dtype=np.float32))
        D = torch.addmm(kn, q, Kt.T, alpha=-2.0)  # (c, Nk) = |k|^2 - 2 q.k; |q|^2 added below
        v, j = torch.topk(D, k, dim=1, largest=False, sorted=True)
        idx[s:s + len(q)] = j.numpy()
        d2[s:s + len(q)] = (v + (q * q).sum(1, keepdim=True)).clamp_min_(0).numpy()
    return idx, d2


def _sqdist(Q, K):
    """Dense (Nq, Nk) squared distances as a torch tensor (float32)."""
    import torch

    q = torch.from_numpy(np.ascontiguousarray(Q, dtype=np.float32))
    kk = torch.from_numpy(np.ascontiguousarray(K, dtype=np.float32))
    D = torch.addmm((kk * kk).sum(1)[None, :], q, kk.T, alpha=-2.0)
    D += (q * q).sum(1, keepdim=True)
    return D.clamp_min_(0)


def _mutual(Bq, Ar):
    """Mutual nearest neighbours between query rows Bq (n, m) and reference rows Ar (r, m).

    Returns (qi, ri, d2) of the mutual pairs and the fraction of queries that are mutual."""
    G = Bq @ Ar.T  # (n, r)
    D = _sqnorm(Bq)[:, None] + _sqnorm(Ar)[None, :] - 2 * G
    f = D.argmin(1)  # query -> reference
    b = D.argmin(0)  # reference -> query
    qi = np.flatnonzero(b[f] == np.arange(len(Bq)))
    return qi, f[qi], np.maximum(D[qi, f[qi]], 0), len(qi) / max(len(Bq), 1)


# ----------------------------------------------------------------------------------------------- ours
def match_pairfree(X, Y, dim: int | None = None, sign_axes: int = 8, restarts: int = 4, subset: int = 2000,
                   iters: int = 2, reject: float | None = None, dense_max: int = 25_000_000,
                   candidates: int = 4, candidate_dims: int = 32, normalize: bool = True, fit_scale: bool = False,
                   seed: int = 0, progress: bool = False, **meta) -> MatchResult:
    """Pair-free rotation and correspondence by PCA sign search and mutual-neighbour Procrustes.

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
    dense_max : largest N1 * N2 solved by a dense linear_sum_assignment; above, sparse candidates
    candidates, candidate_dims : candidates per Y row and the dimensions they are searched in (large N)
    normalize : scale each cloud to unit total variance before matching (different encoders' scales)
    fit_scale : refit the global scale by Procrustes on the final pairs (else the ratio of total variances)
    seed : unused (the search is deterministic); accepted so that every matcher takes the same arguments
    **meta : stored in the rotation's metadata (encoders, datasets)

    Returns
    -------
    MatchResult
    """
    t0 = time.perf_counter()
    timings = {}
    prep = _prepare(X, Y, dim, normalize)
    A, B = prep.A, prep.B
    n1, d = A.shape
    n2 = B.shape[0]
    timings["prepare_s"] = time.perf_counter() - t0

    # 2. rotation-invariant subsets: largest whitened norms in the top-k axes (sign- and rotation-blind)
    k = max(1, min(sign_axes, d))
    Aw = A[:, :k] / np.sqrt(prep.var_a[:k] + 1e-12).astype(np.float32)
    Bw = B[:, :k] / np.sqrt(prep.var_b[:k] + 1e-12).astype(np.float32)
    ny_sub = min(n2, subset)
    nx_sub = min(n1, 2 * subset)
    ys = np.argsort(-_sqnorm(Bw), kind="stable")[:ny_sub]
    xs = np.argsort(-_sqnorm(Aw), kind="stable")[:nx_sub]

    # 3-4. sign search and refinement on the subsets. Small products: one BLAS thread is much faster here
    # than several (thread wake-ups dominate, far worse on a busy machine).
    t = time.perf_counter()
    with blas_threads(1):
        # a few hundred queries rank the patterns; their partners sit among the largest norms of X
        patterns, scores = _sign_search(Aw[xs[: min(nx_sub, 1536)]], Bw[ys[: min(ny_sub, 384)]])
        timings["sign_search_s"] = time.perf_counter() - t
        t = time.perf_counter()
        tried = _refine(A[xs], B[ys], Aw[xs], Bw[ys], patterns, scores, restarts, iters)
    best = max(tried, key=lambda r: r["mutual"])
    R = best["R"]
    timings["refine_s"] = time.perf_counter() - t

    # 5. match every row, refit on all pairs, match again (large N: re-rank the same candidates)
    t = time.perf_counter()
    perm, dist, cand = _assign(A @ R, B, dense_max, candidates, candidate_dims, progress)
    ok = perm >= 0 if reject is None else cand["mutual_mask"]  # partial overlap: refit on confident pairs
    if ok.sum() >= 2:
        with blas_threads(1):
            R = _procrustes(A[ok], B[perm[ok]])
    perm, dist, cand = _assign(A @ R, B, dense_max, candidates, candidate_dims, progress,
                               y_idx=cand["y_idx"] if n1 * n2 > dense_max else None)
    timings["assign_s"] = time.perf_counter() - t

    # unsupervised scores on all rows: mutual nearest neighbours, and the ratio test (nearest X of a Y row
    # at under half the distance of the second nearest)
    mutual_rate, coupling = _mutual_and_coupling(cand, n1, n2)
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
        "rejected": rejected,
        "timings": {kk: round(v, 3) for kk, v in timings.items()}, "seconds": round(time.perf_counter() - t0, 3),
    }
    rot = _rotation_from(prep, R, "pairfree", s_fit, {**meta, "fit": {"pairfree": {
        kk: v for kk, v in info.items() if kk not in ("restarts",)}}})
    return MatchResult(rot, perm, coupling, float(mutual_rate), info)


def _sign_search(Ar, Bq):
    """Score every sign pattern of the k whitened axes: mean of the smaller half of the nearest-neighbour
    squared distances from the sign-flipped queries Bq (q, k) to the references Ar (r, k).

    Returns patterns (2^k, k) and scores (2^k,), lower is better."""
    k = Ar.shape[1]
    if k > 12:
        raise AlignmentError(f"sign_axes={k}: the exhaustive sign search (2^{k} patterns) is too large; use <= 12")
    patterns = np.array(list(itertools.product((1.0, -1.0), repeat=k)), np.float32)
    an = _sqnorm(Ar)[None, :]
    bn = _sqnorm(Bq)[:, None]
    half = max(1, len(Bq) // 2)
    scores = np.empty(len(patterns))
    for p, sgn in enumerate(patterns):
        D = bn + an - 2.0 * ((Bq * sgn) @ Ar.T)  # (q, r)
        scores[p] = np.partition(D.min(1), half - 1)[:half].mean()
    return patterns, scores


def _refine(As, Bs, Aws, Bws, patterns, scores, restarts, iters):
    """ICP from the best sign patterns: mutual nearest neighbours <-> Procrustes, over the top m axes for
    m = 2k, 4k, ... d. As (nx, d), Bs (ny, d) subsets; Aws, Bws their whitened top-k coordinates.

    Returns a list of {"pattern", "sign_score", "mutual", "R" (d, d), "stages"} per restart tried."""
    k, d = Aws.shape[1], As.shape[1]
    stages, m = [], k
    while m < d:
        m = min(2 * m, d)
        stages.append(m)
    tried = []
    for p in np.argsort(scores)[:max(1, restarts)]:
        sgn = patterns[p]
        qi, ri, _, frac = _mutual(Bws * sgn, Aws)  # first pairs from the sign pattern alone
        R, hist = None, []
        for m in stages:
            for _ in range(iters):
                if len(qi) < 2:
                    break
                R = _procrustes(As[ri, :m], Bs[qi, :m])
                qi, ri, _, frac = _mutual(Bs[:, :m], As[:, :m] @ R)
            hist.append((m, round(float(frac), 4)))
        if R is None or R.shape[0] != d:  # d == k, or too few pairs: the signed identity itself
            R = np.eye(d, dtype=np.float32)
            R[:k, :k] = np.diag(sgn)
        _, _, _, frac = _mutual(Bs, As @ R)
        tried.append({"pattern": int(p), "sign_score": float(scores[p]), "mutual": float(frac), "R": R,
                      "stages": hist})
        if frac > 0.9:  # unambiguous: the other restarts cannot beat it by much
            break
    return tried



def _assign(AR, B, dense_max, candidates, candidate_dims, progress, y_idx=None):
    """One-to-one assignment of rows of AR (N1, d) to rows of B (N2, d) by squared distance.

    ``y_idx`` (N2, c): candidates from an earlier call to re-rank instead of searching again (large N).
    Returns perm (N1,) (-1 unmatched), dist (N1,) squared distance of the assigned pair, and the candidate
    structure {"y_idx" (N2, c), "y_d2" (N2, c), "mutual_mask" (N1,)} used for scores and the coupling."""
    from scipy.optimize import linear_sum_assignment

    n1, d = AR.shape
    n2 = B.shape[0]
    perm = np.full(n1, -1, np.int64)
    dist = np.full(n1, np.inf, np.float32)
    if n1 * n2 <= dense_max:
        import torch

        Ct = _sqdist(B, AR)  # (N2, N1)
        c = min(candidates, n1)
        v, j = torch.topk(Ct, c, dim=1, largest=False, sorted=True)
        y_idx, y_d2 = j.numpy().astype(np.int64), v.numpy()
        x_best = Ct.argmin(0).numpy()  # X -> nearest Y
        C = Ct.numpy()
        r, cidx = linear_sum_assignment(C)
        perm[cidx] = r
        dist[cidx] = C[r, cidx]
        mutual_mask = np.zeros(n1, bool)
        mutual_mask[cidx] = (x_best[cidx] == r) & (y_idx[r, 0] == cidx)
        return perm, dist, {"y_idx": y_idx, "y_d2": y_d2, "mutual_mask": mutual_mask}

    # large: candidates in the top axes (most of the variance), re-ranked in full dimension
    m = min(candidate_dims, d)
    c = min(candidates, n1)
    if y_idx is None:
        y_idx, _ = knn(B[:, :m], AR[:, :m], k=c, progress=progress, desc="candidates")
    y_d2 = ((B[:, None, :] - AR[y_idx]) ** 2).sum(-1) if n2 * c * d <= 5e7 else _rerank(B, AR, y_idx)
    o = np.argsort(y_d2, 1)
    y_idx, y_d2 = np.take_along_axis(y_idx, o, 1), np.take_along_axis(y_d2, o, 1)
    # greedy one-to-one over candidate edges by increasing distance
    rows = np.repeat(np.arange(n2), c)
    cols = y_idx.ravel()
    w = y_d2.ravel()
    e = np.argsort(w, kind="stable")
    used_y = np.zeros(n2, bool)
    for i in e:
        yi, xi = rows[i], cols[i]
        if perm[xi] < 0 and not used_y[yi]:
            perm[xi] = yi
            used_y[yi] = True
            dist[xi] = w[i]
    # leftovers: exact assignment among the unmatched rows of both sides, when small enough
    lx, ly = np.flatnonzero(perm < 0), np.flatnonzero(~used_y)
    if len(lx) and len(ly) and len(lx) * len(ly) <= dense_max:
        C = _sqdist(B[ly], AR[lx]).numpy()
        r, cidx = linear_sum_assignment(C)
        perm[lx[cidx]] = ly[r]
        dist[lx[cidx]] = C[r, cidx]
    # X -> nearest Y over the candidate edges (approximate reverse neighbours)
    best_y = np.full(n1, -1, np.int64)
    best_d = np.full(n1, np.inf, np.float32)
    first = y_d2[:, 0]
    o = np.argsort(-first)  # assign in decreasing distance so the smallest wins last
    best_d[y_idx[o, 0]] = first[o]
    best_y[y_idx[o, 0]] = o
    mutual_mask = (perm >= 0) & (best_y == perm) & (y_idx[np.maximum(perm, 0), 0] == np.arange(n1))
    return perm, dist, {"y_idx": y_idx, "y_d2": y_d2, "mutual_mask": mutual_mask}


def _rerank(B, AR, y_idx, chunk=4096):
    out = np.empty(y_idx.shape, np.float32)
    for s in range(0, len(B), chunk):
        diff = B[s:s + chunk, None, :] - AR[y_idx[s:s + chunk]]
        out[s:s + chunk] = np.einsum("ijk,ijk->ij", diff, diff)
    return out


def _mutual_and_coupling(cand, n1, n2):
    """Mutual-NN rate (mutual pairs / min(N1, N2)) and a sparse (N1, N2) soft coupling over each Y row's
    candidates."""
    import scipy.sparse as sp

    y_idx, y_d2 = cand["y_idx"], cand["y_d2"]
    first = y_idx[:, 0]
    # reverse: for each X, its nearest Y among the edges that reach it
    best = np.full(n1, np.inf)
    best_y = np.full(n1, -1)
    rows = np.repeat(np.arange(n2), y_idx.shape[1])
    cols, w = y_idx.ravel(), y_d2.ravel()
    o = np.argsort(-w)
    best[cols[o]] = w[o]
    best_y[cols[o]] = rows[o]
    # per mutual pair, over the smaller side: several captions of one image are not penalised
    mutual = float((best_y[first] == np.arange(n2)).sum() / min(n1, n2))
    tau = float(np.median(y_d2[:, 0])) + 1e-12  # temperature: the typical nearest distance
    logits = -(y_d2 - y_d2[:, :1]) / tau
    p = np.exp(logits)
    p /= p.sum(1, keepdims=True)
    coupling = sp.csr_matrix((p.ravel() / n2, (cols, rows)), shape=(n1, n2))
    return mutual, coupling


# ----------------------------------------------------------------------------------------------- WP
def match_wp(X, Y, dim: int | None = 32, stages=(4, 8, 16, 32, 64), starts: int = 40, keep: int = 4,
             expand: int = 8, iters: int = 10, search_n: int = 500, refine_n: int = 3000, rows_l2: bool = True,
             dense_max: int = 25_000_000, seed: int = 0, progress: bool = False, **meta) -> MatchResult:
    """Coarse-to-fine Wasserstein-Procrustes: for clouds that are only loosely isomorphic (real encoders).

    Alternates an exact one-to-one assignment (``linear_sum_assignment``, i.e. optimal transport between
    uniform point sets) with Procrustes, objective min_{R, P} sum_i ||a_i R - b_P(i)||^2, as in Grave et al.
    (2019). The rotation space is searched coarse to fine over the leading principal axes: ``starts`` random
    rotations of the top ``stages[0]`` axes; the ``keep`` lowest-cost solutions are extended by ``expand``
    random rotations of the axes added at the next stage, and so on up to ``dim``. Search on a random
    subsample of ``search_n`` rows per side, then refine on ``refine_n`` and assign all rows.

    Parameters
    ----------
    X : (N1, D1), Y : (N2, D2)
    dim : shared dimension (default 32; None = min(D1, D2, N - 1))
    rows_l2 : centre then L2-normalise rows before PCA (cosine geometry)

    Returns
    -------
    MatchResult; ``info["ot_cost"]`` is the final mean squared distance of the assignment (lower is better)
    """
    from scipy.optimize import linear_sum_assignment

    t0 = time.perf_counter()
    if dim is not None and np.ndim(X) == 2 and np.ndim(Y) == 2:
        dim = min(dim, np.shape(X)[1], np.shape(Y)[1])  # the default 32 on smaller embeddings
    prep = _prepare(X, Y, dim, True, rows_l2)
    A, B = prep.A, prep.B
    (n1, d), n2 = A.shape, B.shape[0]
    rng = np.random.default_rng(seed)
    xs = rng.permutation(n1)[:search_n]
    ys = rng.permutation(n2)[:search_n]
    steps = [k for k in stages if k < d] + [d]

    def wp(R, As, Bs, k, n_it):
        """Alternate assignment and Procrustes in the top k axes; returns (R, mean cost, cols)."""
        Ak, Bk = As[:, :k], Bs[:, :k]
        for it in range(n_it + 1):
            C = _sqnorm(Ak @ R)[:, None] + _sqnorm(Bk)[None, :] - 2.0 * ((Ak @ R) @ Bk.T)
            r, c = linear_sum_assignment(C)
            if it == n_it:
                return R, float(C[r, c].mean()), (r, c)
            R = _procrustes(Ak[r], Bk[c])

    hist = []
    with blas_threads(1):
        As, Bs = A[xs], B[ys]
        cands = [_haar(steps[0], rng) for _ in range(starts)]
        it = steps
        if progress:
            from tqdm.auto import tqdm

            it = tqdm(steps, desc="wasserstein-procrustes", leave=False)
        for si, k in enumerate(it):
            out = sorted((wp(R0, As, Bs, k, iters)[:2] for R0 in cands), key=lambda t: t[1])
            hist.append((k, round(out[0][1], 5)))
            if si + 1 < len(steps):
                k2 = steps[si + 1]
                cands = []
                for R, _ in out[:keep]:
                    for _ in range(expand):
                        E = np.eye(k2, dtype=np.float32)
                        E[:k, :k] = R
                        M = np.eye(k2, dtype=np.float32)
                        M[k:, k:] = _haar(k2 - k, rng)
                        cands.append(E @ M)
        R = out[0][0]
        if min(n1, n2) > len(xs) or min(n1, n2) > len(ys):  # refine on more rows
            xr, yr = rng.permutation(n1)[:refine_n], rng.permutation(n2)[:refine_n]
            R, _, _ = wp(R, A[xr], B[yr], d, 5)
    perm, dist, cand = _assign(A @ R, B, dense_max, 4, 32, progress)
    ok = perm >= 0
    mutual_rate, coupling = _mutual_and_coupling(cand, n1, n2)
    info = {"method": "wp", "n1": n1, "n2": n2, "dim": d, "stages": hist, "ot_cost": float(dist[ok].mean()),
            "mutual_rate": float(mutual_rate), "matched": int(ok.sum()), "search_n": int(len(xs)),
            "seconds": round(time.perf_counter() - t0, 3)}
    rot = _rotation_from(prep, R, "pairfree-wp", 1.0, {**meta, "fit": {"pairfree": info}})
    return MatchResult(rot, perm, coupling, float(mutual_rate), info)


def _haar(k, rng):
    Qm, Rm = np.linalg.qr(rng.standard_normal((k, k)))
    return (Qm * np.sign(np.diag(Rm))).astype(np.float32)


# ----------------------------------------------------------------------------------------------- GW baseline
def match_gw(X, Y, dim: int | None = None, epsilon: float = 5e-3, max_iter: int = 1000, normalize: bool = True,
             max_n: int = 10_000, seed: int = 0, progress: bool = False, **meta) -> MatchResult:
    """Reference baseline: POT's entropic Gromov-Wasserstein between the two clouds' distance matrices.

    min_T sum_{ijkl} (C1_ik - C2_jl)^2 T_ij T_kl - epsilon H(T), T 1 = p, T^T 1 = q (uniform), with C the
    squared Euclidean distances divided by their mean. The rotation is then the Procrustes fit weighted by
    T: R = polar(A^T T B). The hard correspondence is linear_sum_assignment on -T.

    Parameters
    ----------
    X : (N1, D1), Y : (N2, D2) ; dim : shared dimension as in :func:`match_pairfree`
    epsilon : entropic regularisation (relative to the normalised costs)
    max_n : refuse larger inputs (two dense N x N float64 matrices plus the plan)

    Returns
    -------
    MatchResult with a dense (N1, N2) coupling.
    """
    import ot  # POT: only the baseline needs it

    t0 = time.perf_counter()
    prep = _prepare(X, Y, dim, normalize)
    A, B = prep.A.astype(np.float64), prep.B.astype(np.float64)
    n1, n2 = len(A), len(B)
    if max(n1, n2) > max_n:
        raise AlignmentError(f"Gromov-Wasserstein needs dense {n1}x{n1} and {n2}x{n2} matrices; refusing "
                             f"N > max_n={max_n} (use method='ours')")
    C1 = np.maximum(_sqnorm(A)[:, None] + _sqnorm(A)[None, :] - 2 * A @ A.T, 0)
    C2 = np.maximum(_sqnorm(B)[:, None] + _sqnorm(B)[None, :] - 2 * B @ B.T, 0)
    C1 /= C1.mean()
    C2 /= C2.mean()
    p, q = np.full(n1, 1.0 / n1), np.full(n2, 1.0 / n2)
    import warnings

    with warnings.catch_warnings(record=True) as caught:  # inner Sinkhorn non-convergence: counted, not shown
        warnings.simplefilter("always")
        T = ot.gromov.entropic_gromov_wasserstein(C1, C2, p, q, loss_fun="square_loss", epsilon=epsilon,
                                                  max_iter=max_iter, verbose=False)
    del C1, C2
    from scipy.optimize import linear_sum_assignment

    r, c = linear_sum_assignment(-T)
    perm = np.full(n1, -1, np.int64)
    perm[r] = c
    R = _procrustes_from_plan(A, B, T)
    _, _, _, frac = _mutual(B.astype(np.float32), (A @ R).astype(np.float32)) if n1 * n2 <= 25e6 else (0, 0, 0, np.nan)
    info = {"method": "gw", "n1": n1, "n2": n2, "dim": A.shape[1], "epsilon": epsilon,
            "mutual_rate": float(frac), "seconds": round(time.perf_counter() - t0, 3),
            "solver_warnings": len(caught)}
    rot = _rotation_from(prep, R.astype(np.float32), "pairfree-gw", 1.0, {**meta, "fit": {"pairfree": info}})
    return MatchResult(rot, perm, T, float(frac), info)


def _procrustes_from_plan(A, B, T):
    M = A.T @ (T @ B)  # (d, d) cross-covariance under the coupling
    U, _, Vt = _svd(M)
    return U @ Vt
