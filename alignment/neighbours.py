"""Neighbours and one-to-one assignment for the pair-free matchers: chunked exact k-NN, mutual nearest
neighbours, dense (Hungarian) or sparse-candidate (greedy + Hungarian on leftovers) assignment, and the
mutual-NN rate with a sparse soft coupling. Memory is O(chunk x N) above the dense limit."""
from __future__ import annotations

import numpy as np


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


def _assign(AR, B, dense_max, candidates, candidate_dims, progress, y_idx=None, force=None):
    """One-to-one assignment of rows of AR (N1, d) to rows of B (N2, d) by squared distance.

    ``force`` (x rows, y rows): known pairs that the assignment keeps.
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
    if force is not None and len(force[0]):
        perm[force[0]] = force[1]
        used_y[force[1]] = True
        dist[force[0]] = ((AR[force[0]] - B[force[1]]) ** 2).sum(1)
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
