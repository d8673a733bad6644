"""Nearest-neighbour search for the matchers: exact (:func:`knn`), or approximate for large clouds through an
inverted file (IVF) of k-means cells (:func:`ivf_knn`).

The keys are grouped into ``cells`` by k-means (Lloyd's iterations on a sample of the keys); each query
searches, exactly, the keys of its ``probe`` nearest cells. Exact search costs Nq x Nk distances; this costs
Nq x cells (the coarse step) + Nq x probe x Nk / cells (the fine step). With cells ~ 2 sqrt(Nk) both are
O(N^1.5) with small constants; in the matcher's 32 candidate dimensions at N = 1M that is about 0.3 TFLOP
instead of 64 TFLOP.

On CPU both run in faiss (``faiss.IndexFlatL2`` and ``faiss.IndexIVFFlat``, same cells / probe / k-means
iterations / training sample / seed), which was faster side by side on 2 busy cores (``python -m eval align
libraries``, 32-d clustered keys, k = 10): exact 20,000 x 20,000 2.3 s against 6.8 s for the torch code below,
same answers; 100,000: 60 s against 81 s; IVF 20,000: 0.29 s against 0.79 s (recall 0.9996 / 0.9999),
100,000: 2.4 s against 5.0 s (recall 0.990 / 0.988). Rerun here: IVF 20,000 on one thread 0.24 s against
0.73 s; exact 20,000 on one thread 1.8 s both, on two threads at a load of 8-9 faiss 4.1 s against 2.9 s
(its OpenMP threads wait actively; callers on a busy machine pass ``threads`` from
:func:`alignment._checks.work_threads`, one there), at a load of 5 1.4 s against 2.4 s. With torch imported
first faiss shares torch's OpenMP runtime (one thread pool). The torch code stays for ``device="cuda"``
(faiss-cpu has no GPU) and for an install without faiss; ``backend="torch"`` forces it. faiss runs its OpenMP loops
and BLAS on torch's current thread count (:class:`alignment._checks.faiss_threads`), so
:class:`alignment._checks.torch_threads` around a search bounds both.

Memory (torch code): the keys sorted by cell (a copy of K), the queries' probe lists (Nq x probe int64), the
result (Nq x probe*k) and one chunk x cells block of the coarse step; no Nq x Nk matrix. On CPU torch's
addmm + topk are faster than numpy's matmul + argpartition. The k-means is seeded in both, so results are
deterministic on CPU.
"""
from __future__ import annotations

import math

import numpy as np


def default_cells(nk: int) -> int:
    """Cell count for ``nk`` keys: about 2 sqrt(nk), at least 1 and at most nk / 16 (cells of >= 16 keys)."""
    return int(max(1, min(nk // 16, round(2 * math.sqrt(nk)))))


def _faiss_on(backend: str, device, *arrays):
    """The faiss module when this search runs in faiss, else None: ``backend`` "faiss", or "auto" on CPU
    (``device`` None or "cpu", no array a CUDA tensor) with faiss importable; "torch": never."""
    if backend not in ("auto", "faiss", "torch"):
        from alignment.errors import AlignmentError

        raise AlignmentError(f"backend={backend!r}: use 'auto', 'faiss' or 'torch'")
    if backend == "torch":
        return None
    on_cpu = (device is None or str(device) == "cpu") and not any(
        getattr(getattr(a, "device", None), "type", "cpu") != "cpu" for a in arrays)
    if backend == "faiss":
        if not on_cpu:
            from alignment.errors import AlignmentError

            raise AlignmentError(f"backend='faiss' searches on CPU (faiss-cpu); device={device!r}: use 'torch'")
        import faiss

        return faiss
    if not on_cpu:
        return None
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def _f32(a) -> np.ndarray:
    """C-contiguous float32 numpy copy or view of a numpy array or torch tensor."""
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.ascontiguousarray(a, dtype=np.float32)


def _threads(threads=None) -> int:
    """Threads for a faiss call: ``threads``, else torch's current setting (so that a caller's
    ``torch_threads`` context holds for faiss too), else faiss's own."""
    import sys

    if threads:
        return int(threads)
    if "torch" in sys.modules:
        return sys.modules["torch"].get_num_threads()
    import faiss

    return faiss.omp_get_max_threads()


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
            seed: int = 0, device=None, threads: int | None = None, backend: str = "auto"):
    """Approximate k nearest neighbours (squared Euclidean) of each row of Q among the rows of K.

    Parameters
    ----------
    Q : (Nq, m), K : (Nk, m) arrays (numpy or torch)
    k : neighbours per query
    cells : k-means cells (default :func:`default_cells`); probe : cells searched per query
    iters, sample : k-means iterations, and training rows per cell (a random sample of K)
    device : torch device for the work (default: CPU)
    threads : CPU threads (default: torch's setting). faiss: for all of it; torch: for the coarse steps
        (k-means, routing), the cell-by-cell search, many small products, runs on one
    backend : "auto" (faiss's ``IndexIVFFlat`` on CPU when faiss is installed, else torch), "faiss", "torch"

    Returns
    -------
    idx : (Nq, k) int64 sorted by distance; d2 : (Nq, k) float32 squared distances (numpy). A query whose
    probed cells hold fewer than k keys is searched exactly.
    """
    faiss = _faiss_on(backend, device, Q, K)
    nk = K.shape[0]
    k = min(k, nk)
    cells = max(1, min(int(cells or default_cells(nk)), nk))
    probe = max(1, min(probe, cells))
    if faiss is not None:
        return _faiss_ivf(faiss, _f32(Q), _f32(K), k, cells, probe, iters, sample, seed, _threads(threads))
    import torch

    from alignment._checks import torch_threads

    Qt = torch.as_tensor(_f32(Q), device=device)
    Kt = torch.as_tensor(_f32(K), device=device)
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
        idx[short], d2[short] = knn(Qt[torch.as_tensor(short, device=Qt.device)], Kt, k=k, backend="torch")
    return idx, d2


def _faiss_ivf(faiss, Q, K, k, cells, probe, iters, sample, seed, threads):
    """:func:`ivf_knn` in faiss: ``IndexIVFFlat`` whose k-means (``iters`` Lloyd's iterations, seeded) trains
    on ``sample`` x ``cells`` random keys (numpy's generator from ``seed``)."""
    from alignment._checks import faiss_threads

    nk, m = K.shape
    rng = np.random.default_rng(seed)
    train = K[rng.permutation(nk)[:max(1, sample) * cells]]
    with faiss_threads(threads):
        ix = faiss.IndexIVFFlat(faiss.IndexFlatL2(m), m, cells)
        ix.cp.niter = int(iters)
        ix.cp.seed = int(seed) % (1 << 31)
        ix.cp.min_points_per_centroid = 1  # no warning for small samples (the default asks for 39 a cell)
        ix.cp.max_points_per_centroid = len(train)  # no second subsampling inside faiss
        ix.train(train)
        ix.add(K)
        ix.nprobe = probe
        d2, idx = ix.search(Q, k)
    np.maximum(d2, 0, out=d2)
    short = np.flatnonzero((idx < 0).any(1))
    if len(short):  # too few keys in the probed cells: exact search for these queries
        idx[short], d2[short] = knn(Q[short], K, k=k, backend="faiss", threads=threads)
    return idx.astype(np.int64, copy=False), d2


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


def knn(Q, K, k: int = 1, chunk: int = 1024, progress: bool = False, desc: str = "neighbours", device=None,
        backend: str = "auto", threads: int | None = None):
    """Exact k nearest neighbours (squared Euclidean) of each row of Q among the rows of K, in chunks.

    Parameters
    ----------
    Q : (Nq, m), K : (Nk, m) float arrays (numpy or torch)
    k : neighbours per query (<= Nk)
    chunk : query rows per block; memory is about chunk * Nk floats (torch; faiss blocks its own products)
    device : torch device for the work (default: where K is, CPU for numpy)
    backend : "auto" (faiss's ``IndexFlatL2`` on CPU when faiss is installed, else torch), "faiss", "torch"
    threads : faiss's threads (default: torch's current setting)

    Returns
    -------
    idx : (Nq, k) int64 sorted by distance; d2 : (Nq, k) float32 squared distances (numpy)
    """
    faiss = _faiss_on(backend, device, Q, K)
    if faiss is not None:
        return _faiss_knn(faiss, Q, K, k, chunk, progress, desc, _threads(threads))
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


def _faiss_knn(faiss, Q, K, k, chunk, progress, desc, threads):
    """:func:`knn` in faiss (``IndexFlatL2``); in blocks of ``chunk`` query rows only to show progress."""
    from alignment._checks import faiss_threads

    Q, K = _f32(Q), _f32(K)
    k = min(k, K.shape[0])
    with faiss_threads(threads):
        ix = faiss.IndexFlatL2(K.shape[1])
        ix.add(K)
        if not progress:
            d2, idx = ix.search(Q, k)
        else:
            from tqdm.auto import tqdm

            idx = np.empty((Q.shape[0], k), np.int64)
            d2 = np.empty((Q.shape[0], k), np.float32)
            for s in tqdm(range(0, Q.shape[0], chunk), desc=desc, unit="chunk", leave=False):
                d2[s:s + chunk], idx[s:s + chunk] = ix.search(Q[s:s + chunk], k)
    np.maximum(d2, 0, out=d2)
    return idx.astype(np.int64, copy=False), d2
