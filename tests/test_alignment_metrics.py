"""Alignment metrics against hand-computed values and invariances; the permutation null; recall@k."""
from __future__ import annotations

import numpy as np
import pytest

from alignment.errors import AlignmentError
from alignment.metrics import (
    METRICS,
    cka,
    cknna,
    clamp_outliers,
    hsic_biased,
    hsic_unbiased,
    l2_normalize,
    mutual_knn,
    permutation_null,
    recall_at_k,
    score,
    svcca,
    unbiased_cka,
)
from alignment.procrustes import random_orthogonal


def _angles(deg):
    a = np.deg2rad(deg)
    return np.c_[np.cos(a), np.sin(a)]


def test_mutual_knn_hand_computed():
    # X: nearest (cosine) neighbours 0<->1 and 2<->3. Y at 0, 80, 90, 170 degrees: neighbours 1, 2, 1, 2.
    X, Y = _angles([0, 10, 90, 100]), _angles([0, 80, 90, 170])
    # rows agree for 0 (1 == 1) and 3 (2 == 2), disagree for 1 (0 vs 2) and 2 (3 vs 1): 2 / 4
    assert mutual_knn(X, Y, k=1) == pytest.approx(0.5)


def test_mutual_knn_identical_and_rotated_sets_score_one(rng):
    X = rng.standard_normal((80, 16))
    assert mutual_knn(X, X) == 1.0
    assert mutual_knn(X, 3.0 * X @ random_orthogonal(16, 1)) == 1.0


def test_cka_hand_computed_and_invariances(rng):
    x = np.array([[1.0], [2.0], [3.0]])
    y = np.array([[1.0], [3.0], [2.0]])
    # linear CKA of 1-d features = squared correlation: centred (-1, 0, 1) . (-1, 1, 0) = 1, norms 2, 2
    assert cka(x, y, normalize=False) == pytest.approx(0.25, abs=1e-12)
    X = rng.standard_normal((50, 12))
    Q = random_orthogonal(12, 2)
    assert cka(X, X @ Q * 4.0) == pytest.approx(1.0, abs=1e-12)
    assert unbiased_cka(X, X @ Q) == pytest.approx(1.0, abs=1e-12)
    assert cka(X, X @ Q, kernel="rbf") == pytest.approx(1.0, abs=1e-12)
    assert 0 < cka(X, rng.standard_normal((50, 7))) < 0.5


def test_feature_space_hsic_equals_kernel_formula(rng):
    X = l2_normalize(rng.standard_normal((30, 6)))
    Y = l2_normalize(rng.standard_normal((30, 4)) + X[:, :4])
    K, L = X @ X.T, Y @ Y.T
    H = np.eye(30) - 1 / 30
    assert hsic_biased(K, L) == pytest.approx(np.trace(K @ H @ L @ H), rel=1e-10)
    ref_b = hsic_biased(K, L) / np.sqrt(hsic_biased(K, K) * hsic_biased(L, L))
    ref_u = hsic_unbiased(K, L) / np.sqrt(hsic_unbiased(K, K) * hsic_unbiased(L, L))
    assert cka(X, Y) == pytest.approx(ref_b, rel=1e-10)
    assert unbiased_cka(X, Y) == pytest.approx(ref_u, rel=1e-10)


def test_hsic_unbiased_by_hand():
    # n = 4, K = L = J - I (all off-diagonal ones): tr(K~L~) = 12, sums 12 and 12, 1^T K~ L~ 1 = 36
    K = np.ones((4, 4)) - np.eye(4)
    expected = (12 + 12 * 12 / (3 * 2) - 2 * 36 / 2) / (4 * 1)
    assert hsic_unbiased(K, K) == pytest.approx(expected)  # = 0: a constant kernel carries no signal
    assert expected == 0


def _cknna_dense(X, Y, k):
    """Straight transcription of the definition with dense N x N masks (independent of the sparse code)."""
    X, Y = l2_normalize(X), l2_normalize(Y)
    K, L = X @ X.T, Y @ Y.T
    n = len(K)

    def mask(M):
        Mh = M.copy()
        np.fill_diagonal(Mh, -np.inf)
        out = np.zeros_like(M)
        out[np.arange(n)[:, None], np.argsort(-Mh, 1)[:, :k]] = 1
        return out

    def sim(K, L):
        m = mask(K) * mask(L)
        return hsic_unbiased(m * K, m * L)

    return sim(K, L) / np.sqrt(sim(K, K) * sim(L, L))


def test_cknna_matches_dense_definition_and_is_one_on_identical(rng):
    X = rng.standard_normal((40, 8))
    Y = X @ rng.standard_normal((8, 5)) + 0.7 * rng.standard_normal((40, 5))
    assert cknna(X, Y, k=5) == pytest.approx(_cknna_dense(X, Y, 5), rel=1e-10)
    assert cknna(X, X @ random_orthogonal(8, 3)) == pytest.approx(1.0, abs=1e-12)


def test_svcca_hand_computed_and_linear_invariance(rng):
    x = np.array([[1.0], [2.0], [3.0]])
    y = np.array([[1.0], [3.0], [2.0]])
    assert svcca(x, y, cca_dim=1, normalize=False) == pytest.approx(0.5, abs=1e-9)  # |corr| = 1/2
    X = rng.standard_normal((100, 10))
    assert svcca(X, X @ rng.standard_normal((10, 10)), normalize=False) == pytest.approx(1.0, abs=1e-9)
    assert svcca(X, X @ random_orthogonal(10, 4)) == pytest.approx(1.0, abs=1e-9)


def test_clamp_is_prh_mean_row_quantile():
    X = np.array([[0.0, 1.0, 2.0, 100.0], [0.0, 1.0, 2.0, 3.0]])
    t = (np.quantile([0, 1, 2, 100], 0.5) + np.quantile([0, 1, 2, 3], 0.5)) / 2  # = 1.5
    assert np.array_equal(clamp_outliers(X, 0.5), np.clip(X, -t, t))
    assert mutual_knn(X.repeat(3, 0) + np.arange(6)[:, None], X.repeat(3, 0), k=2, clamp=0.95) >= 0


def test_registry_and_null_near_chance(rng):
    assert set(METRICS) == {"mutual_knn", "cka", "unbiased_cka", "cknna", "svcca"}
    X, Y = rng.standard_normal((300, 16)), rng.standard_normal((300, 16))
    null = permutation_null("mutual_knn", X, Y, n_perm=10, seed=1)
    chance = 10 / 299  # two independent k-NN lists of N - 1 candidates overlap by k^2 / (N - 1) on average
    assert null["null_mean"] == pytest.approx(chance, abs=0.01)
    assert abs(null["score"] - chance) < 0.015 and abs(null["z"]) < 4 and null["n_perm"] == 10
    rel = permutation_null("cka", X, X @ random_orthogonal(16, 5) + 0.1 * Y, n_perm=5)
    assert rel["score"] > 0.95 and rel["z"] > 20 and rel["p"] == pytest.approx(1 / 6)
    for name in METRICS:
        assert np.isfinite(score(name, X, Y))


def test_recall_at_k_hand_computed():
    keys = np.eye(4)
    query = np.array([[1.0, 0.5, 0, 0],  # ranking 0, 1, ...: correct key 0 at rank 1
                      [1.0, 0.5, 0, 0],  # correct key 1 at rank 2
                      [0, 0, 0.2, 1.0]])  # correct key 2 at rank 2
    r = recall_at_k(query, keys, np.array([0, 1, 2]), ks=(1, 2))
    assert r["R@1"] == pytest.approx(1 / 3) and r["R@2"] == 1.0 and r["median_rank"] == 2
    # any correct key counts: query 0 hits key 0, query 1 still ranks key 1 second, query 2 hits key 3
    multi = recall_at_k(query, keys, [[0, 1], [1], [2, 3]], ks=(1,))
    assert multi["R@1"] == pytest.approx(2 / 3) and multi["chance@1"] == pytest.approx((2 + 1 + 2) / 3 / 4)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_bad_input_errors(name, rng):
    X = rng.standard_normal((20, 12))
    with pytest.raises(AlignmentError, match="NaN or inf"):
        score(name, np.r_[X[:-1], [[np.inf] * 12]], X)
    with pytest.raises(AlignmentError, match="rows"):
        score(name, X, X[:15])
    with pytest.raises(AlignmentError, match="empty"):
        score(name, np.zeros((0, 3)), np.zeros((0, 3)))
    with pytest.raises(AlignmentError, match="identical"):
        score(name, np.ones((20, 12)), X)
    with pytest.raises(AlignmentError, match="at least"):
        score(name, X[:1], X[:1])


def test_other_errors(rng):
    X = rng.standard_normal((20, 4))
    with pytest.raises(AlignmentError, match=r"mutual_knn with k=10 \(neighbours exclude the row itself\) needs at least 11 rows, got 10"):
        mutual_knn(X[:10], X[:10])
    with pytest.raises(AlignmentError, match="unknown metric"):
        score("nope", X, X)
    with pytest.raises(AlignmentError, match="features per side"):
        svcca(X, X)
    with pytest.raises(AlignmentError, match="dimensional"):
        recall_at_k(X, X[:, :3], np.arange(20))
