"""Nearest-neighbour search for the matchers: exact in chunks (:func:`knn`), or approximate for large clouds
through an inverted file (IVF) of k-means cells (:func:`ivf_knn`).

The keys are grouped into ``cells`` by k-means (Lloyd's iterations on a sample of the keys); each query
searches, exactly, the keys of its ``probe`` nearest cells. Exact search costs Nq x Nk distances; this costs
Nq x cells (the coarse step) + Nq x probe x Nk / cells (the fine step). With cells ~ 2 sqrt(Nk) both are
O(N^1.5) with small constants; in the matcher's 32 candidate dimensions at N = 1M that is about 0.3 TFLOP
instead of 64 TFLOP.

Memory: the keys sorted by cell (a copy of K), the queries' probe lists (Nq x probe int64), the result
(Nq x probe*k) and one chunk x cells block of the coarse step; no Nq x Nk matrix.

Written with torch so that the same code runs on a GPU (``device="cuda"``); on CPU torch's addmm + topk are
faster than numpy's matmul + argpartition. The k-means is seeded, so results are deterministic on CPU.
"""
from __future__ import annotations

import math

import numpy as np


def default_cells(nk: int) -> int:
    """Cell count for ``nk`` keys: about 2 sqrt(nk), at least 1 and at most nk / 16 (cells of >= 16 keys)."""
    return int(max(1, min(nk // 16, round(2 * math.sqrt(nk)))))


def _nearest_centroids(Z, C, p: int, chunk: int = 2048):
    """Indices (n, p) of the p nearest rows of C (c, m) to each row of Z (n, m), nearest first. Blocks of
    ``chunk`` x c floats (under glibc's 32 MB mmap threshold for a few thousand cells, so reused)."""
    import torch

    cn = (C * C).sum(1)[None, :]
    out = torch.empty((Z.shape[0], p), dtype=torch.int64, device=Z.device)
    for s in range(0, Z.shape[0], chunk):
        D = torch.addmm(cn, Z[s:s + chunk], C.T, alpha=-2.0)
        out[s:s + chunk] = D.argmin(1, keepdim=True) if p == 1 else D.topk(p, 1, largest=False, sorted=True)[1]
    return out


def kmeans(Z, cells: int, iters: int = 8, seed: int = 0):
    """Lloyd's k-means on the rows of Z (n, m) torch tensor, started from ``cells`` distinct random rows.
    An emptied cell keeps its old centroid. Returns the centroids (cells, m)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    C = Z[torch.randperm(Z.shape[0], generator=g)[:cells].to(Z.device)].clone()
    for _ in range(iters):
        a = _nearest_centroids(Z, C, 1)[:, 0]
        cnt = torch.bincount(a, minlength=cells).to(Z.dtype)
        S = torch.zeros_like(C).index_add_(0, a, Z)
        C = torch.where(cnt[:, None] > 0, S / cnt.clamp_min(1)[:, None], C)
    return C


def ivf_knn(Q, K, k: int = 1, cells: int | None = None, probe: int = 4, iters: int = 8, sample: int = 32,
            seed: int = 0, device=None, threads: int | None = None):
    """Approximate k nearest neighbours (squared Euclidean) of each row of Q among the rows of K.

    Parameters
    ----------
    Q : (Nq, m), K : (Nk, m) arrays (numpy or torch)
    k : neighbours per query
    cells : k-means cells (default :func:`default_cells`); probe : cells searched per query
    iters, sample : k-means iterations, and training rows per cell (a random sample of K)
    device : torch device for the work (default: CPU)
    threads : CPU threads for the coarse steps (k-means, routing); the cell-by-cell search, many small
        products, runs on one (default: torch's setting)

    Returns
    -------
    idx : (Nq, k) int64 sorted by distance; d2 : (Nq, k) float32 squared distances (numpy). A query whose
    probed cells hold fewer than k keys is searched exactly.
    """
    import torch

    from alignment._checks import torch_threads

    Qt = torch.as_tensor(np.ascontiguousarray(Q, dtype=np.float32), device=device)
    Kt = torch.as_tensor(np.ascontiguousarray(K, dtype=np.float32), device=device)
    nk = Kt.shape[0]
    k = min(k, nk)
    cells = max(1, min(int(cells or default_cells(nk)), nk))
    probe = max(1, min(probe, cells))
    with torch_threads(threads or torch.get_num_threads()):
        g = torch.Generator().manual_seed(seed)
        C = kmeans(Kt[torch.randperm(nk, generator=g)[:sample * cells].to(Kt.device)], cells, iters, seed)
        # file the keys: sorted by cell, with each cell's end; route the queries: (query, probe slot) pairs
        # sorted by the probed cell
        ka = _nearest_centroids(Kt, C, 1)[:, 0]
        qa = _nearest_centroids(Qt, C, probe).reshape(-1)
    korder = torch.argsort(ka, stable=True)
    kend = torch.cumsum(torch.bincount(ka, minlength=cells), 0).cpu().numpy()
    porder = torch.argsort(qa, stable=True)
    qend = torch.cumsum(torch.bincount(qa, minlength=cells), 0).cpu().numpy()
    del ka, qa
    with torch_threads(1):
        best_d, best_i = _search_cells(Qt, Kt[korder], korder, kend, porder // probe, porder % probe, qend, k,
                                       probe)
    v, j = best_d.topk(k, 1, largest=False, sorted=True)
    idx = best_i.gather(1, j)
    d2 = (v + (Qt * Qt).sum(1, keepdim=True)).clamp_min_(0)
    idx, d2 = idx.cpu().numpy(), d2.cpu().numpy()
    short = np.flatnonzero((idx < 0).any(1))
    if len(short):  # too few keys in the probed cells: exact search for these queries
        idx[short], d2[short] = knn(Qt[torch.as_tensor(short, device=Qt.device)], Kt, k=k)
    return idx, d2


def _search_cells(Qt, Ks, korder, kend, pq, pslot, qend, k, probe):
    """Exact search inside each cell: the queries routed to cell c (rows ``pq`` of Qt, in probe slot
    ``pslot``) against its keys (Ks sorted by cell, original rows ``korder``). Returns (Nq, probe * k)
    |k|^2 - 2 q.k and key rows (inf / -1 where a cell had fewer than k keys)."""
    import torch

    nq, dev = Qt.shape[0], Qt.device
    best_d = torch.full((nq, probe * k), float("inf"), device=dev)
    best_i = torch.full((nq, probe * k), -1, dtype=torch.int64, device=dev)
    kn = (Ks * Ks).sum(1)
    cols = torch.arange(k, device=dev)[None, :]
    q0 = k0 = 0
    for c in range(len(kend)):
        q1, k1 = int(qend[c]), int(kend[c])
        if q1 > q0 and k1 > k0:
            qs = pq[q0:q1]
            D = torch.addmm(kn[None, k0:k1], Qt[qs], Ks[k0:k1].T, alpha=-2.0)
            kc = min(k, k1 - k0)
            v, j = D.topk(kc, 1, largest=False, sorted=True)
            at = pslot[q0:q1, None] * k + cols[:, :kc]
            best_d[qs[:, None], at] = v
            best_i[qs[:, None], at] = korder[k0 + j]
        q0, k0 = q1, k1
    return best_d, best_i


def knn(Q, K, k: int = 1, chunk: int = 1024, progress: bool = False, desc: str = "neighbours", device=None):
    """Exact k nearest neighbours (squared Euclidean) of each row of Q among the rows of K, in chunks.

    Parameters
    ----------
    Q : (Nq, m), K : (Nk, m) float arrays (numpy or torch)
    k : neighbours per query (<= Nk)
    chunk : query rows per block; memory is about chunk * Nk floats
    device : torch device for the work (default: where K is, CPU for numpy)

    Returns
    -------
    idx : (Nq, k) int64 sorted by distance; d2 : (Nq, k) float32 squared distances (numpy)
    """
    import torch  # its addmm + topk are several times faster than numpy's matmul + argpartition here

    def tensor(a):
        if isinstance(a, torch.Tensor):
            return a.to(device=device or a.device, dtype=torch.float32)
        return torch.as_tensor(np.ascontiguousarray(a, dtype=np.float32), device=device)

    k = min(k, K.shape[0])
    Kt = tensor(K)
    kn = (Kt * Kt).sum(1)[None, :]
    idx = np.empty((Q.shape[0], k), np.int64)
    d2 = np.empty((Q.shape[0], k), np.float32)
    it = range(0, Q.shape[0], chunk)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc=desc, unit="chunk", leave=False)
    buf = torch.empty((min(chunk, Q.shape[0]), Kt.shape[0]), device=Kt.device)  # reused: no fresh pages
    for s in it:
        q = tensor(Q[s:s + chunk]).to(Kt.device)
        D = torch.addmm(kn, q, Kt.T, alpha=-2.0, out=buf[:len(q)])  # (c, Nk) = |k|^2 - 2 q.k; |q|^2 below
        v, j = torch.topk(D, k, dim=1, largest=False, sorted=True)
        idx[s:s + len(q)] = j.cpu().numpy()
        d2[s:s + len(q)] = (v + (q * q).sum(1, keepdim=True)).clamp_min_(0).cpu().numpy()
    return idx, d2
