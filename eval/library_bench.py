"""The field's libraries against the matchers' hand-written kernels, side by side on the same inputs.

Each row times one kernel the pair-free matchers use and its library counterpart, with a quality check, so
that a hand-written kernel is kept only where the table shows it as good and faster:

* k-NN: ``alignment.nnsearch.knn`` (exact, torch addmm + topk) and ``ivf_knn`` (inverted file), their torch
  code (``backend="torch"``; on CPU they now run faiss) against faiss's
  ``IndexFlatL2`` and ``IndexIVFFlat``; quality: recall@k against the exact answer;
* k-means: ``alignment.rosetta.kmeans`` (numpy, k-means++ start) against ``faiss.Kmeans``; quality: inertia
  (mean squared distance to the centre; the blobs' own is the dimension), and how many of the separated blobs
  got a centre of their own;
* Sinkhorn: the entropic plan of ``alignment.rosetta.anneal_soft`` (``iters`` scaling rounds in numpy)
  against POT's ``ot.sinkhorn`` (same kernel, same number of rounds; and its log-domain solver); quality:
  the largest difference of the plans;
* LAP: scipy's dense ``linear_sum_assignment`` (what ``refine`` uses) against scipy's sparse
  ``min_weight_full_bipartite_matching`` on a k-NN graph.

faiss-cpu is a core dependency (pyproject.toml); without it the faiss rows say "not installed".

    python -m eval align libraries [--quick] [--out FILE]
"""
from __future__ import annotations

import json
import os
import time

import numpy as np


def _timed(fn, repeat: int = 1):
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return out, best


def _recall(idx, ref) -> float:
    k = ref.shape[1]
    return float(np.mean([len(set(a[:k]) & set(b)) / k for a, b in zip(idx, ref)]))


def _faiss():
    try:
        import faiss
    except ImportError:
        return None
    faiss.omp_set_num_threads(os.cpu_count() or 1)
    return faiss


def knn_rows(n: int, dim: int = 32, k: int = 10, seed: int = 0) -> list[dict]:
    from alignment.nnsearch import default_cells, ivf_knn, knn

    rng = np.random.default_rng(seed)
    K, _ = _blobs(n, dim, 200, seed)  # clustered keys, as embeddings are; queries near the keys
    Q = (K[rng.permutation(n)] + 0.3 * rng.standard_normal((n, dim))).astype(np.float32)
    # the hand-written torch kernels (what nnsearch runs on a GPU or without faiss; on CPU it runs faiss)
    (ref, _), t_exact = _timed(lambda: knn(Q, K, k=k, backend="torch"))
    rows = [{"kernel": "k-NN exact", "n": n, "dim": dim, "impl": "alignment.nnsearch.knn (torch)", "seconds": t_exact,
             "quality": 1.0, "measure": f"recall@{k}"}]
    (idx, _), t = _timed(lambda: ivf_knn(Q, K, k=k, backend="torch"))
    rows.append({"kernel": "k-NN approximate", "n": n, "dim": dim, "impl": "alignment.nnsearch.ivf_knn (torch)",
                 "seconds": t, "quality": _recall(idx, ref), "measure": f"recall@{k}"})
    faiss = _faiss()
    if faiss is None:
        rows.append({"kernel": "k-NN exact", "n": n, "dim": dim, "impl": "faiss (not installed)"})
        return rows

    def flat():
        ix = faiss.IndexFlatL2(dim)
        ix.add(K)
        return ix.search(Q, k)

    (_, fi), t = _timed(flat)
    rows.append({"kernel": "k-NN exact", "n": n, "dim": dim, "impl": "faiss.IndexFlatL2", "seconds": t,
                 "quality": _recall(fi, ref), "measure": f"recall@{k}"})
    cells = default_cells(n)

    def ivf():
        quant = faiss.IndexFlatL2(dim)
        ix = faiss.IndexIVFFlat(quant, dim, cells)
        ix.cp.niter = 8
        ix.train(K[rng.permutation(n)[:min(n, 32 * cells)]])
        ix.add(K)
        ix.nprobe = 4
        return ix.search(Q, k)

    (_, fi), t = _timed(ivf)
    rows.append({"kernel": "k-NN approximate", "n": n, "dim": dim, "impl": f"faiss.IndexIVFFlat ({cells} cells, "
                 "probe 4)", "seconds": t, "quality": _recall(fi, ref), "measure": f"recall@{k}"})
    return rows


def _blobs(n: int, dim: int, k: int, seed: int):
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((k, dim)) * 4
    lab = rng.integers(0, k, n)
    return (C[lab] + rng.standard_normal((n, dim))).astype(np.float32), lab


def kmeans_rows(n: int, dim: int = 64, k: int = 30, seed: int = 0, restarts: int = 5) -> list[dict]:
    """Inertia and the blobs recovered (each true blob the majority of exactly one centre's rows) over
    ``restarts`` seeds: the mean time, the mean inertia and how many restarts recovered every blob."""
    from alignment.rosetta import kmeans

    Z, lab = _blobs(n, dim, k, seed)
    rows = []
    for backend in ("numpy", "faiss"):
        if backend == "faiss" and _faiss() is None:
            rows.append({"kernel": "k-means", "n": n, "dim": dim, "impl": "faiss (not installed)"})
            continue
        ts, inert, found = [], [], []
        for s in range(restarts):
            (a, C), t = _timed(lambda s=s: kmeans(Z, k, seed=s, backend=backend))
            ts.append(t)
            inert.append(float(((Z - C[a]) ** 2).sum(1).mean()))
            major = [np.bincount(lab[a == c], minlength=k).argmax() for c in range(k) if (a == c).any()]
            found.append(len(set(major)))
        rows.append({"kernel": "k-means", "n": n, "dim": dim, "impl": f"alignment.rosetta.kmeans({backend!r})",
                     "seconds": float(np.mean(ts)), "quality": float(np.mean(inert)), "measure": "inertia",
                     "note": f"blobs with a centre of their own: {np.mean(found):.1f} of {k} (mean of {restarts})"})
    return rows


def sinkhorn_rows(n: int, dim: int = 64, tau: float = 0.02, iters: int = 20, seed: int = 0) -> list[dict]:
    import ot

    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, dim))
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b = a[rng.permutation(n)] + 0.1 * rng.standard_normal((n, dim)) / np.sqrt(dim)
    b /= np.linalg.norm(b, axis=1, keepdims=True)

    def ours():  # the loop of anneal_soft, plan scaled to total mass 1 like POT's
        S = a @ b.T / tau
        S -= S.max()
        K = np.exp(S)
        u, v = np.ones(n), np.ones(n)
        for _ in range(iters):
            u = 1.0 / np.maximum(K @ v, 1e-300)
            v = 1.0 / np.maximum(K.T @ u, 1e-300)
        P = (u[:, None] * K) * v[None, :]
        return P / P.sum()

    w = np.full(n, 1.0 / n)

    def pot(method):  # as anneal_soft calls it: the cost from a and b inside the timing, as ours's kernel is
        M = -(a @ b.T)
        M -= M.min()
        return ot.sinkhorn(w, w, M.T, tau, method=method, numItermax=iters, stopThr=0.0, warn=False).T

    P0, t0 = _timed(ours, 3)
    rows = [{"kernel": "Sinkhorn", "n": n, "dim": dim, "impl": f"numpy loop, anneal_soft's before POT ({iters} "
             "rounds)", "seconds": t0, "quality": 0.0, "measure": "max |plan - ours|"}]
    P1, t1 = _timed(lambda: pot("sinkhorn"), 3)
    rows.append({"kernel": "Sinkhorn", "n": n, "dim": dim, "impl": f"ot.sinkhorn ({iters} rounds; anneal_soft's)",
                 "seconds": t1, "quality": float(np.abs(P1 - P0).max()), "measure": "max |plan - ours|"})
    P2, t2 = _timed(lambda: pot("sinkhorn_log"), 3)
    rows.append({"kernel": "Sinkhorn", "n": n, "dim": dim, "impl": f"ot.sinkhorn log-domain ({iters} rounds)",
                 "seconds": t2, "quality": float(np.abs(P2 - P0).max()), "measure": "max |plan - ours|"})
    return rows


def lap_rows(n: int, dim: int = 32, k: int = 10, seed: int = 0) -> list[dict]:
    from scipy.optimize import linear_sum_assignment
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import min_weight_full_bipartite_matching

    from alignment.nnsearch import knn

    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, dim)).astype(np.float32)
    B = (A[rng.permutation(n)] + 0.3 * rng.standard_normal((n, dim))).astype(np.float32)
    C = (A * A).sum(1)[:, None] - 2 * A @ B.T + (B * B).sum(1)[None, :]  # dense (n, n): n of a few thousand
    (r, c), t0 = _timed(lambda: linear_sum_assignment(C))
    best = float(C[r, c].sum())
    rows = [{"kernel": "LAP", "n": n, "dim": dim, "impl": "scipy linear_sum_assignment (dense)", "seconds": t0,
             "quality": 1.0, "measure": "cost / optimum"}]

    def sparse():
        idx, d2 = knn(A, B, k=k)
        G = csr_matrix((d2.ravel() + 1e-9, idx.ravel(), np.arange(0, n * k + 1, k)), shape=(n, n))
        return min_weight_full_bipartite_matching(G)

    try:
        (r2, c2), t1 = _timed(sparse)
        q = float(C[r2, c2].sum()) / best
    except ValueError:  # no perfect matching inside the k-NN graph
        t1, q = float("nan"), float("nan")
    rows.append({"kernel": "LAP", "n": n, "dim": dim, "impl": f"scipy min_weight_full_bipartite_matching ({k}-NN "
                 "graph)", "seconds": t1, "quality": q, "measure": "cost / optimum"})
    return rows


def run(quick: bool = False, out=None) -> dict:
    t0 = time.time()
    sizes = (20000,) if quick else (20000, 100000)
    rows = []
    for n in sizes:
        rows += knn_rows(n)
    rows += kmeans_rows(3000 if quick else 10000, dim=64 if quick else 384)
    rows += sinkhorn_rows(1000 if quick else 2000)
    rows += lap_rows(1000 if quick else 2000)
    res = {"rows": rows, "seconds": round(time.time() - t0, 1), "loadavg": os.getloadavg(),
           "cpus": os.cpu_count()}
    if out:
        from pathlib import Path

        Path(out).write_text(json.dumps(res, indent=1))
    return res


def table(res: dict) -> str:
    lines = ["| kernel | n | dim | implementation | seconds | quality | measure | note |", "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        if "seconds" not in r:
            lines.append(f"| {r['kernel']} | {r['n']} | {r['dim']} | {r['impl']} | - | - | - | |")
            continue
        lines.append(f"| {r['kernel']} | {r['n']} | {r['dim']} | {r['impl']} | {r['seconds']:.3f} | "
                     f"{r['quality']:.4g} | {r['measure']} | {r.get('note', '')} |")
    lines.append(f"\n{res['seconds']} s on {res['cpus']} CPUs, load {tuple(round(v, 2) for v in res['loadavg'])}")
    return "\n".join(lines)
