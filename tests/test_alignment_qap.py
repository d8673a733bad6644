"""Class-level quadratic assignment: exact brute force and FAQ recover planted permutations."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from alignment.errors import AlignmentError
from alignment.procrustes import random_orthogonal
from alignment.qap import brute_force_qap, centroid_similarity, faq_qap, match_classes, qap_objective


def _planted(n, seed, noise=0.0):
    rng = np.random.default_rng(seed)
    G = rng.standard_normal((n, 3))  # class centroids in a low-dimensional space: structured similarities
    A = G @ G.T
    p = rng.permutation(n)
    B = np.empty_like(A)
    B[np.ix_(p, p)] = A  # class i of A is class p[i] of B
    E = noise * rng.standard_normal((n, n))
    return A, B + (E + E.T) / 2, p


@pytest.mark.parametrize("maximize", [True, False])
def test_brute_force_equals_exhaustive_search(maximize):
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((6, 6)), rng.standard_normal((6, 6))
    perm, value = brute_force_qap(A, B, maximize=maximize)
    pick = max if maximize else min
    best = pick(itertools.permutations(range(6)), key=lambda q: qap_objective(A, B, q))
    assert value == pytest.approx(qap_objective(A, B, best), abs=1e-12)
    assert value == pytest.approx(qap_objective(A, B, perm), abs=1e-12)


def test_brute_force_small_blocks_same_answer():
    A, B, p = _planted(7, 1, noise=0.05)
    assert np.array_equal(brute_force_qap(A, B, block=50)[0], brute_force_qap(A, B)[0])


def test_planted_permutations_recovered():
    A, B, p = _planted(8, 2, noise=0.02)
    assert np.array_equal(match_classes(A, B, method="brute"), p)
    assert np.array_equal(match_classes(A, B, method="auto"), p)
    A, B, p = _planted(16, 3, noise=0.01)
    assert np.array_equal(match_classes(A, B, method="faq", restarts=10), p)
    assert np.array_equal(faq_qap(A, B, restarts=5)[0], p)


def test_blind_match_of_class_centroids_across_rotated_spaces(rng):
    # two "encoders": the same 6 class structure seen through a rotation plus noise, classes listed
    # in a different order on the text side
    centers = rng.standard_normal((6, 10)) * 3
    labels = np.repeat(np.arange(6), 30)
    X = centers[labels] + rng.standard_normal((180, 10))
    Y = X @ random_orthogonal(10, 4) + 0.1 * rng.standard_normal((180, 10))
    rename = np.array([3, 0, 5, 1, 4, 2])  # text-side class id of image class i
    SA, ca = centroid_similarity(X, labels)
    SB, cb = centroid_similarity(Y, rename[labels], classes=range(6))
    assert list(ca) == list(range(6))
    assert np.array_equal(match_classes(SA, SB, method="brute"), rename)


def test_centroid_similarity_hand_computed():
    X = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0], [1.0, 1.0]])
    S, classes = centroid_similarity(X, ["a", "a", "b", "c"])
    c = 1 / np.sqrt(2)
    assert classes == ["a", "b", "c"]
    assert np.allclose(S, [[1, 0, c], [0, 1, c], [c, c, 1]], atol=1e-12)


def test_errors():
    with pytest.raises(AlignmentError, match="square"):
        match_classes(np.zeros((3, 4)), np.zeros((3, 4)))
    with pytest.raises(AlignmentError, match="same classes"):
        match_classes(np.eye(3), np.eye(4))
    with pytest.raises(AlignmentError, match="<= 10 classes"):
        match_classes(np.eye(11), np.eye(11), method="brute")
    with pytest.raises(AlignmentError, match="unknown QAP method"):
        match_classes(np.eye(3), np.eye(3), method="x")
    assert match_classes(np.eye(1), np.eye(1)).tolist() == [0]
