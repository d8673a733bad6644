"""Neighbours and one-to-one assignment for the pair-free matchers: chunked exact k-NN, mutual nearest
neighbours, dense (Hungarian) or sparse-candidate (greedy + Hungarian on leftovers) assignment, and the
mutual-NN rate with a sparse soft coupling. Memory is O(chunk x N) above the dense limit."""
from __future__ import annotations

import numpy as np

from alignment._checks import blas_threads, in_parallel
from alignment.nnsearch import knn  # noqa: F401  (re-exported: the matchers import it from here)


def sqnorm(A):
    return np.einsum("ij,ij->i", A, A)


def sqdist(Q, K):
    """Dense (Nq, Nk) squared distances as a torch tensor (float32)."""
    import torch

    q = torch.from_numpy(np.ascontiguousarray(Q, dtype=np.float32))
    kk = torch.from_numpy(np.ascontiguousarray(K, dtype=np.float32))
    D = torch.addmm((kk * kk).sum(1)[None, :], q, kk.T, alpha=-2.0)
    D += (q * q).sum(1, keepdim=True)
    return D.clamp_min_(0)


def mutual_neighbours(Bq, Ar, threads: int = 1):
    """Mutual nearest neighbours between query rows Bq (n, m) and reference rows Ar (r, m). With ``threads``
    >= 2 the rows (then the columns, for the reverse neighbours) are split between Python threads, each on
    one BLAS thread: the same arithmetic, and no OpenBLAS workers left spinning on a core afterwards.

    Returns (qi, ri, d2) of the mutual pairs and the fraction of queries that are mutual."""
    n, r = len(Bq), len(Ar)
    D = np.empty((n, r), np.result_type(Bq.dtype, Ar.dtype))  # turned in place into squared distances
    bn, an = sqnorm(Bq), sqnorm(Ar)
    rows = np.array_split(np.arange(n), max(1, threads))
    cols = np.array_split(np.arange(r), max(1, threads))

    def fwd(q):  # query -> reference
        s, e = (int(q[0]), int(q[-1]) + 1) if len(q) else (0, 0)
        Ds = D[s:e]
        np.matmul(Bq[s:e], Ar.T, out=Ds)
        Ds *= -2.0
        Ds += bn[s:e, None]
        Ds += an[None, :]
        return Ds.argmin(1)

    def rev(c):  # reference -> query
        return D[:, int(c[0]):int(c[-1]) + 1].argmin(0) if len(c) else np.empty(0, np.int64)

    with _one_blas_thread(threads):
        f = np.concatenate(in_parallel([lambda q=q: fwd(q) for q in rows], threads))
    b = np.concatenate(in_parallel([lambda c=c: rev(c) for c in cols], threads))
    qi = np.flatnonzero(b[f] == np.arange(n))
    return qi, f[qi], np.maximum(D[qi, f[qi]], 0), len(qi) / max(n, 1)


def matmul_rows(A, B, threads: int = 1):
    """A @ B with the rows of A split between ``threads`` Python threads, each on one BLAS thread (no
    OpenBLAS workers left spinning afterwards: they would hold a core and slow a threaded torch search that
    follows); one thread: a plain product under the current BLAS setting."""
    if threads < 2:
        return A @ B
    out = np.empty((A.shape[0], B.shape[1]), np.result_type(A.dtype, B.dtype))

    def part(q):
        if len(q):
            np.matmul(A[int(q[0]):int(q[-1]) + 1], B, out=out[int(q[0]):int(q[-1]) + 1])

    with blas_threads(1):
        in_parallel([lambda q=q: part(q) for q in np.array_split(np.arange(A.shape[0]), threads)], threads)
    return out


def _one_blas_thread(threads):
    """One BLAS thread per Python thread when the work is split between several; else as it is."""
    import contextlib

    return blas_threads(1) if threads >= 2 else contextlib.nullcontext()


# Candidate search for the sparse assignment: exact below this many Y x X pairs (N1 x N2), the IVF of
# alignment.nnsearch above (on CPU; a GPU searches exactly). Measured in docs/results/matcher.md.
IVF_FROM = 1_000_000_000


def assign(AR, B, dense_max, candidates, candidate_dims, progress, y_idx=None, force=None, search="auto",
            device=None, threads=None):
    """One-to-one assignment of rows of AR (N1, d) to rows of B (N2, d) by squared distance.

    ``force`` (x rows, y rows): known pairs that the assignment keeps.
    ``y_idx`` (N2, c): candidates from an earlier call to re-rank instead of searching again (large N).
    ``search``: "exact", "ivf" or "auto" (IVF above ``IVF_FROM`` pairs on CPU); ``device``: torch device of
    the candidate search; ``threads``: CPU threads for its large products (default: all).
    Returns perm (N1,) (-1 unmatched), dist (N1,) squared distance of the assigned pair, and the candidate
    structure {"y_idx" (N2, c), "y_d2" (N2, c), "mutual_mask" (N1,)} used for scores and the coupling."""
    n1, d = AR.shape
    n2 = B.shape[0]
    if n1 * n2 <= dense_max:
        return _assign_dense(AR, B, candidates, force)
    perm = np.full(n1, -1, np.int64)
    dist = np.full(n1, np.inf, np.float32)
    # large: candidates in the top axes (most of the variance), re-ranked in full dimension
    m = min(candidate_dims, d)
    c = min(candidates, n1)
    if y_idx is None:
        y_idx, _ = _candidates(B[:, :m], AR[:, :m], c, search, device, progress, threads)
    y_d2 = ((B[:, None, :] - AR[y_idx]) ** 2).sum(-1) if n2 * c * d <= 5e7 else _rerank(B, AR, y_idx)
    o = np.argsort(y_d2, 1)
    y_idx, y_d2 = np.take_along_axis(y_idx, o, 1), np.take_along_axis(y_d2, o, 1)
    used_y = np.zeros(n2, bool)
    if force is not None and len(force[0]):
        perm[force[0]] = force[1]
        used_y[force[1]] = True
        dist[force[0]] = ((AR[force[0]] - B[force[1]]) ** 2).sum(1)
    # greedy one-to-one over candidate edges by increasing distance
    greedy_matching(np.repeat(np.arange(n2), c), y_idx.ravel(), y_d2.ravel(), perm, used_y, dist)
    _match_leftovers(AR, B, perm, used_y, dist, dense_max, m, c, search, device, threads)
    # X -> nearest Y over the candidate edges (approximate reverse neighbours)
    best_y = np.full(n1, -1, np.int64)
    first = y_d2[:, 0]
    o = np.argsort(-first)  # assign in decreasing distance so the smallest wins last
    best_y[y_idx[o, 0]] = o
    mutual_mask = (perm >= 0) & (best_y == perm) & (y_idx[np.maximum(perm, 0), 0] == np.arange(n1))
    return perm, dist, {"y_idx": y_idx, "y_d2": y_d2, "mutual_mask": mutual_mask}


def _assign_dense(AR, B, candidates, force):
    """:func:`assign` for small N1 x N2: Hungarian on the dense cost."""
    import torch
    from scipy.optimize import linear_sum_assignment

    n1 = AR.shape[0]
    perm = np.full(n1, -1, np.int64)
    dist = np.full(n1, np.inf, np.float32)
    Ct = sqdist(B, AR)  # (N2, N1)
    c = min(candidates, n1)
    v, j = torch.topk(Ct, c, dim=1, largest=False, sorted=True)
    y_idx, y_d2 = j.numpy().astype(np.int64), v.numpy()
    x_best = Ct.argmin(0).numpy()  # X -> nearest Y
    C = Ct.numpy()
    fx, fy = force if force is not None else ((), ())
    if len(fx):  # known pairs: far cheaper than any other edge, so the assignment takes them
        kept = C[fy, fx].copy()
        C[fy, fx] = -float(C.max()) * (len(fx) + 1) - 1.0
    r, cidx = linear_sum_assignment(C)
    if len(fx):
        C[fy, fx] = kept
    perm[cidx] = r
    dist[cidx] = C[r, cidx]
    mutual_mask = np.zeros(n1, bool)
    mutual_mask[cidx] = (x_best[cidx] == r) & (y_idx[r, 0] == cidx)
    return perm, dist, {"y_idx": y_idx, "y_d2": y_d2, "mutual_mask": mutual_mask}


def _candidates(Q, K, c, search, device, progress, threads=None):
    """The c nearest rows of K for each row of Q: exact, or through the IVF (see ``IVF_FROM``)."""
    from alignment._checks import torch_threads
    from alignment.nnsearch import ivf_knn

    if search not in ("auto", "exact", "ivf"):
        from alignment.errors import AlignmentError

        raise AlignmentError(f"search={search!r}: use 'auto', 'exact' or 'ivf'")
    gpu = device is not None and str(device) != "cpu"
    if search == "ivf" or (search == "auto" and not gpu and len(Q) * len(K) > IVF_FROM):
        return ivf_knn(Q, K, k=c, device=device, threads=threads)
    import torch

    with torch_threads(threads or torch.get_num_threads()):
        return knn(Q, K, k=c, progress=progress, desc="candidates", device=device)


def greedy_matching(rows, cols, w, perm, used, dist=None, rounds: int = 50, tail: int = 1000):
    """Greedy one-to-one matching over weighted edges (row ``rows[e]`` of Y, row ``cols[e]`` of X, weight
    ``w[e]``), lightest first, filling ``perm`` (X -> Y, -1 free), ``used`` (Y taken) and ``dist`` in place.

    Vectorised: each round accepts every live edge that is the lightest live edge at both its ends (ties
    broken by edge order); with distinct weights that is the sequential greedy's matching (Hoepman's
    locally-dominant edges). After ``rounds`` rounds, or once under ``tail`` live edges remain, the rest
    runs sequentially."""
    order = np.argsort(w, kind="stable")
    R, C, W = rows[order], cols[order], w[order]
    live = np.flatnonzero(~used[R] & (perm[C] < 0))
    first_r = np.empty(len(used), np.int64)
    first_c = np.empty(len(perm), np.int64)
    for _ in range(rounds):
        if len(live) <= tail:
            break
        r, c = R[live], C[live]
        pos = np.arange(len(live))
        first_r[r[::-1]] = pos[::-1]  # the earliest (lightest) live edge of each row: the last write wins
        first_c[c[::-1]] = pos[::-1]
        acc = (first_r[r] == pos) & (first_c[c] == pos)
        e = live[acc]
        perm[C[e]] = R[e]
        used[R[e]] = True
        if dist is not None:
            dist[C[e]] = W[e]
        live = live[~used[R[live]] & (perm[C[live]] < 0)]
    for e in live:
        yi, xi = R[e], C[e]
        if perm[xi] < 0 and not used[yi]:
            perm[xi] = yi
            used[yi] = True
            if dist is not None:
                dist[xi] = W[e]


def _match_leftovers(AR, B, perm, used_y, dist, dense_max, m, c, search, device, threads=None, rounds: int = 3):
    """Rows left free by the greedy pass: exact assignment (Hungarian) among them when their product is at
    most ``dense_max``; else up to ``rounds`` rounds of candidate search + greedy among the free rows only."""
    from scipy.optimize import linear_sum_assignment

    for rnd in range(rounds + 1):
        lx, ly = np.flatnonzero(perm < 0), np.flatnonzero(~used_y)
        if not len(lx) or not len(ly):
            return
        if len(lx) * len(ly) <= dense_max:
            C = sqdist(B[ly], AR[lx]).numpy()
            r, cidx = linear_sum_assignment(C)
            perm[lx[cidx]] = ly[r]
            dist[lx[cidx]] = C[r, cidx]
            return
        if rnd == rounds:
            return
        cc = min(c, len(lx))
        j, _ = _candidates(B[ly, :m], AR[lx, :m], cc, search, device, False, threads)
        rows = np.repeat(ly, cc)
        cols = lx[j.ravel()]
        w = _rerank(B[ly], AR, lx[j]).ravel()
        greedy_matching(rows, cols, w, perm, used_y, dist)


def _rerank(B, AR, y_idx, chunk=4096):
    out = np.empty(y_idx.shape, np.float32)
    for s in range(0, len(B), chunk):
        diff = B[s:s + chunk, None, :] - AR[y_idx[s:s + chunk]]
        out[s:s + chunk] = np.einsum("ijk,ijk->ij", diff, diff)
    return out


def mutual_and_coupling(cand, n1, n2):
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


# The names these had before they were public, for the modules still importing them (alignment.pairfree,
# starts, rosetta, diagnose): drop once those import the public names.
