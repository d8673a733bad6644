"""The matcher's large-N parts at small N, forced through tiny chunks: blockwise PCA preparation, IVF candidate
search, vectorised greedy matching, leftover rounds, blockwise refit, and the bench's blockwise problem."""
from __future__ import annotations

import numpy as np
import pytest

from alignment.matching import cross_cov, prepare
from alignment.neighbours import assign, greedy_matching
from alignment.nnsearch import ivf_knn, knn
from alignment.pairfree import match_pairfree
from eval.matcher_bench import make_problem, make_problem_chunked, scaling


def test_blockwise_preparation_equals_one_block():
    X, Y, _, _ = make_problem(300, 12, seed=2)
    one = prepare(X, Y, None)
    many = prepare(X, Y, None, chunk=7)
    for a, b in ((one.A, many.A), (one.B, many.B), (one.Vx, many.Vx), (one.Vy, many.Vy)):
        assert np.abs(a - b).max() < 1e-4
    assert np.allclose(one.var_a, many.var_a, rtol=1e-5) and one.sx == pytest.approx(many.sx, rel=1e-6)
    # unit total variance (per row: the axes divide by n - 1), principal axes by decreasing variance, positive skewness on every axis
    assert np.sum(many.var_a) == pytest.approx(300 / 299, rel=1e-5) and np.all(np.diff(many.var_a) <= 0)
    assert np.all((many.A ** 3).mean(0) >= 0)
    # cosine geometry (rows_l2) and fewer rows than dimensions go through the same blocks
    l2a, l2b = prepare(X, Y, 8, rows_l2=True), prepare(X, Y, 8, rows_l2=True, chunk=5)
    assert np.abs(l2a.A - l2b.A).max() < 1e-4 and l2a.sx == pytest.approx(l2b.sx, rel=1e-6)
    few = prepare(X[:9], Y[:9], None, chunk=4)
    assert few.A.shape == (9, 8) and np.allclose(few.A.T @ few.A, np.diag(few.var_a) * 8, atol=1e-4)


def test_blockwise_cross_covariance():
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((50, 4)), rng.standard_normal((60, 4))
    perm = rng.permutation(60)[:50]
    ok = rng.random(50) < 0.7
    assert np.allclose(cross_cov(A, B, perm, ok, chunk=6), A[ok].T @ B[perm[ok]])


def test_vectorised_greedy_is_the_sequential_greedy():
    rng = np.random.default_rng(1)
    n, c = 400, 5
    rows = np.repeat(np.arange(n), c)
    cols = rng.integers(0, n, n * c)
    w = rng.random(n * c).astype(np.float32)
    want = np.full(n, -1)
    used = np.zeros(n, bool)
    for e in np.argsort(w, kind="stable"):  # the textbook greedy, edge by edge
        if want[cols[e]] < 0 and not used[rows[e]]:
            want[cols[e]], used[rows[e]] = rows[e], True
    for rounds, tail in ((50, 0), (2, 0), (0, 10 ** 9)):  # all vectorised, mixed, all sequential
        perm, used2, dist = np.full(n, -1), np.zeros(n, bool), np.full(n, np.inf, np.float32)
        greedy_matching(rows, cols, w, perm, used2, dist, rounds=rounds, tail=tail)
        assert np.array_equal(perm, want)
        got = perm >= 0
        assert np.all(dist[got] == [w[(rows == perm[x]) & (cols == x)].min() for x in np.flatnonzero(got)])


def test_ivf_equals_exact_when_every_cell_is_probed_and_finds_close_partners():
    rng = np.random.default_rng(3)
    K = (rng.standard_normal((2000, 6)) * [3, 2, 1.5, 1, 0.7, 0.5]).astype(np.float32)
    Q = K[rng.permutation(2000)[:500]] + 0.01 * rng.standard_normal((500, 6)).astype(np.float32)
    ei, ed = knn(Q, K, k=3)
    ii, idd = ivf_knn(Q, K, k=3, cells=20, probe=20)
    assert np.array_equal(ii, ei) and np.allclose(idd, ed, atol=1e-4)
    ii, _ = ivf_knn(Q, K, k=1, cells=40, probe=2)  # the nearest (a near copy) sits in a probed cell
    assert np.array_equal(ii[:, 0], ei[:, 0])
    ii, idd = ivf_knn(Q, K[:12], k=12, cells=6, probe=1)  # no cell holds 12 keys: searched exactly
    ei, ed = knn(Q, K[:12], k=12)
    assert np.array_equal(ii, ei) and np.allclose(idd, ed, atol=1e-4)


def test_sparse_assignment_with_ivf_and_leftover_rounds_is_exact():
    X, Y, true, _ = make_problem(1500, 32, seed=4)
    prep = prepare(X, Y, None)
    res = match_pairfree(X, Y, dense_max=1000, search="ivf")  # everything sparse, candidates by IVF
    assert res.accuracy(true) == 1.0 and res.info["matched"] == 1500
    # a Y row whose candidates are all taken waits for the leftover rounds (dense_max too small for one
    # Hungarian on the leftovers): one candidate per row, half of the rows pointed at the same X rows
    AR, B = prep.A, prep.A[true.argsort()]  # B row j is A row (true^-1)[j]: the identity match
    y_idx = true.argsort()[:, None].copy()  # Y row j -> its X row
    y_idx[::2] = y_idx[1::2]  # even Y rows now only know their odd neighbour's partner
    perm, _, _ = assign(AR, B, 1, 1, 32, False, y_idx=y_idx, search="ivf")
    assert np.array_equal(perm, true)


def test_chunked_problem_has_the_stated_correspondence():
    X, Y, true, Q = make_problem_chunked(700, 16, noise=0.0, chunk=64)
    assert X.dtype == np.float32 and np.abs(X[:, None] if False else X @ Q - Y[true]).max() < 1e-4
    X, Y, true, Q = make_problem_chunked(700, 16, noise=0.0, overlap=0.5, chunk=64)
    ok = true >= 0
    assert ok.sum() == 350 and len(set(true[ok])) == 350 and np.abs(X[ok] @ Q - Y[true[ok]]).max() < 1e-4
    res = match_pairfree(*make_problem_chunked(2000, 24, chunk=300)[:2], dense_max=10)
    assert res.info["matched"] == 2000


def test_scaling_ratio_against_n_log_n():
    rows = [{"n": n, "noise": 0.05, "overlap": 1.0, "ours": {"seconds": s}}
            for n, s in ((5000, 1.0), (50_000, 2.0), (1_000_000, 60.0))]
    (c,) = scaling(rows)
    assert (c["n1"], c["n2"]) == (50_000, 1_000_000)
    assert c["per_point_ratio"] == pytest.approx(1.5) and c["nlogn_ratio"] == pytest.approx(1.277, abs=1e-3)
    assert c["within_nlogn"] is False
