"""The field's libraries in place of hand-written kernels (issue 39): faiss for the k-NN searches of
alignment.nnsearch on CPU, POT's Sinkhorn in alignment.rosetta.anneal_soft. Each is checked against the code
it replaced (the torch search, which still runs on a GPU or without faiss; the numpy Sinkhorn loop, written
out here)."""
from __future__ import annotations

import numpy as np
import pytest

from alignment.errors import AlignmentError
from alignment.nnsearch import ivf_knn, knn
from alignment.rosetta import anneal_soft, polar

faiss = pytest.importorskip("faiss")


def _problem(nq=300, nk=500, m=8, seed=0):
    rng = np.random.default_rng(seed)
    K = (rng.standard_normal((nk, m)) * np.linspace(2, 0.5, m)).astype(np.float32)
    Q = (K[rng.permutation(nk)[:nq]] + 0.1 * rng.standard_normal((nq, m))).astype(np.float32)
    return Q, K


@pytest.mark.parametrize("nq", [7, 300])  # faiss scans one by one under 20 queries, with BLAS above
def test_knn_faiss_equals_torch_and_brute_force(nq):
    Q, K = _problem(nq)
    D = ((Q[:, None].astype(np.float64) - K[None]) ** 2).sum(-1)
    ref = np.argsort(D, 1)[:, :5]
    for backend in ("faiss", "torch", "auto"):
        idx, d2 = knn(Q, K, k=5, chunk=64, backend=backend)
        assert idx.shape == (nq, 5) and idx.dtype == np.int64 and d2.dtype == np.float32
        assert np.array_equal(idx, ref), backend
        assert np.abs(d2 - np.sort(D, 1)[:, :5]).max() < 1e-4
        assert (np.diff(d2, axis=1) >= 0).all()
    import torch  # torch tensors in, numpy out, on either path

    for backend in ("faiss", "torch"):
        idx, d2 = knn(torch.as_tensor(Q), torch.as_tensor(K), k=5, backend=backend)
        assert isinstance(idx, np.ndarray) and np.array_equal(idx, ref)


def test_knn_k_above_the_keys_and_progress():
    Q, K = _problem(50, 60)
    K = K[:6]
    for backend in ("faiss", "torch"):
        idx, d2 = knn(Q, K, k=10, backend=backend, progress=True, chunk=16)
        assert idx.shape == (50, 6) and (np.sort(idx, 1) == np.arange(6)).all()


def test_ivf_faiss_and_torch_both_exact_when_every_cell_is_probed():
    Q, K = _problem(400, 3000, 6, seed=3)
    ei, ed = knn(Q, K, k=3, backend="torch")
    for backend in ("faiss", "torch"):
        ii, idd = ivf_knn(Q, K, k=3, cells=20, probe=20, backend=backend)
        assert ii.dtype == np.int64 and idd.dtype == np.float32 and ii.shape == (400, 3)
        assert np.array_equal(ii, ei) and np.allclose(idd, ed, atol=1e-4)
        # the same seed gives the same answer; a few cells of a few keys: short lists are searched exactly
        a = ivf_knn(Q, K, k=2, cells=60, probe=2, seed=5, backend=backend)
        b = ivf_knn(Q, K, k=2, cells=60, probe=2, seed=5, backend=backend)
        assert np.array_equal(a[0], b[0]) and (a[0] >= 0).all()
        assert np.mean(a[0][:, 0] == ei[:, 0]) > 0.95
        ii, idd = ivf_knn(Q, K[:12], k=12, cells=6, probe=1, backend=backend)
        assert np.array_equal(ii, knn(Q, K[:12], k=12, backend="torch")[0])


def test_faiss_threads_are_restored_and_backend_checked():
    Q, K = _problem(40, 100)
    before = faiss.omp_get_max_threads()
    knn(Q, K, k=2, backend="faiss", threads=1)
    ivf_knn(Q, K, k=2, cells=4, backend="faiss", threads=1)
    assert faiss.omp_get_max_threads() == before
    with pytest.raises(AlignmentError, match="backend"):
        knn(Q, K, backend="numpy")
    with pytest.raises(AlignmentError, match="CPU"):
        knn(Q, K, backend="faiss", device="cuda")


def _anneal_soft_pot(A, B, R, taus, sub, iters=20, updates=2, seed=0):
    """anneal_soft with POT's Sinkhorn in place of the hand loop (posed transposed: POT scales columns first)."""
    import ot

    rng = np.random.default_rng(seed)
    R = np.asarray(R, np.float64)
    for tau in taus:
        xs = rng.permutation(len(A))[:sub]
        ys = rng.permutation(len(B))[:sub]
        a, b = A[xs].astype(np.float64), B[ys].astype(np.float64)
        wa, wb = np.full(len(a), 1.0 / len(a)), np.full(len(b), 1.0 / len(b))
        for _ in range(updates):
            M = -((a @ R) @ b.T)
            M -= M.min()
            P = ot.sinkhorn(wb, wa, M.T, tau, numItermax=iters, stopThr=0.0, warn=False).T
            R = polar(a.T @ P @ b).astype(np.float64)
    return R.astype(np.float32)


def test_anneal_soft_hand_sinkhorn_gives_pots_rotation():
    """The hand-written Sinkhorn stays (faster here, figure in anneal_soft); POT's is the reference."""
    rng = np.random.default_rng(0)
    d = 16
    A = rng.standard_normal((600, d)) * np.linspace(2, 0.5, d)
    A = (A / np.linalg.norm(A, axis=1, keepdims=True)).astype(np.float32)
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    B = ((A @ Q)[rng.permutation(600)] + 0.02 * rng.standard_normal((600, d))).astype(np.float32)
    R0 = polar(Q + 0.3 * rng.standard_normal((d, d)))
    taus = np.geomspace(0.5, 0.002, 12)
    ref = _anneal_soft_pot(A, B, R0, taus, 400)
    got = anneal_soft(A, B, R0, taus=taus, sub=400)
    assert got.dtype == np.float32 and got.shape == (d, d)
    assert np.abs(got - ref).max() < 1e-5
