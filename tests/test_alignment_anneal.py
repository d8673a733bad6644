"""Annealed soft assignment (alignment.anneal) and auto's use of it."""
from __future__ import annotations

import numpy as np
import pytest

from alignment.anneal import anneal, sign_vector
from alignment.errors import AlignmentError
from alignment.pairfree import match, match_pairfree
from eval.matcher_bench import make_problem


def test_sign_vector_follows_the_sign_search_order():
    assert sign_vector(0, 3).tolist() == [1, 1, 1]
    assert sign_vector(1, 3).tolist() == [1, 1, -1]      # the last axis varies fastest
    assert sign_vector(4, 3).tolist() == [-1, 1, 1]
    assert sign_vector(7, 3).tolist() == [-1, -1, -1]


def test_anneal_stays_at_an_exact_rotation_and_finds_it_from_its_signs():
    rng = np.random.default_rng(0)
    A = (rng.standard_normal((300, 12)) * np.arange(12, 0, -1)).astype(np.float32)
    Q = np.linalg.qr(rng.standard_normal((12, 12)))[0].astype(np.float32)
    order = rng.permutation(300)
    B = (A @ Q)[order]
    assert np.abs(anneal(A, B, Q, steps=10) - Q).max() < 1e-3
    # PCA-like case: B is A with flipped axes, started from those signs
    s = np.where(rng.random(12) < 0.5, -1.0, 1.0).astype(np.float32)
    R = anneal(A, (A * s)[order], np.diag(s), steps=10)
    assert np.abs(R - np.diag(s)).max() < 1e-3


def test_auto_anneals_where_a_wrong_answer_overfits_the_mutual_check():
    # N=1000, d=128, noise 1.8 x rms: ours is wrong (under 10 % right) yet 61 % of its rows are mutual
    # nearest neighbours (a 128-d rotation fitted to 1,000 rows); its held-out score (0.36) gives it away,
    # and the annealed soft assignment from ours' sign patterns finds the rotation (oracle assignment 100 %)
    X, Y, true, _ = make_problem(1000, 128, noise=1.8, seed=0)
    cheap = match_pairfree(X, Y)
    assert cheap.accuracy(true) < 0.1 and cheap.score > 0.5
    res = match(X, Y)   # method="auto"
    a = res.info["auto"]
    assert a["ran"][:2] == ["ours", "anneal"] and a["chosen"] == "anneal"
    assert a["assignment_score"]["anneal"] > a["assignment_score"]["ours"]
    assert res.accuracy(true) > 0.95


def test_anneal_by_name_and_unknown_names():
    X, Y, true, _ = make_problem(200, 8, seed=10)
    res = match(X, Y, method="anneal")
    assert res.info["method"] == "anneal" and res.accuracy(true) == 1.0
    with pytest.raises(AlignmentError, match="known: auto, ours, .*anneal"):
        match(X, Y, method="softassign")


@pytest.mark.parametrize("n, d, noise, overlap", [(600, 32, 0.7, 0.5), (400, 16, 0.05, 1.0),
                                                  pytest.param(1000, 128, 1.8, 1.0, marks=pytest.mark.slow)])
def test_auto_is_never_worse_than_any_matcher_it_can_run(n, d, noise, overlap):
    # by more than 3 points: it chooses by an unsupervised score
    from alignment.csls import match_csls

    X, Y, true, _ = make_problem(n, d, noise=noise, overlap=overlap, seed=0)
    cheap = match_pairfree(X, Y)
    best = max(cheap.accuracy(true), match(X, Y, method="anneal").accuracy(true),
               match_csls(X, Y, init=[cheap.perm]).accuracy(true))
    assert match(X, Y).accuracy(true) >= best - 0.03


def test_matcher_ceiling_easy_problem_found_is_truth():
    """Low noise: the matcher's answer and the true pairs settle on the same fixed point (all right), so the
    data does not prefer a wrong answer."""
    from eval.experiments.matcher_ceiling import run

    r = run(n=300, dim=16, noise=0.05)
    assert r["oracle"] == 1.0 and r["auto"]["accuracy"] == 1.0
    assert r["truth"]["accuracy"] == r["found"]["accuracy"] == 1.0
    assert r["truth"]["cost"] == pytest.approx(r["found"]["cost"], rel=1e-4)
    assert not r["data_prefers_found"]


@pytest.mark.slow
def test_matcher_ceiling_noise_2_data_prefers_the_wrong_answer():
    """Noise 2.0, full overlap (the grid point that misses the oracle by 9 points): the true pairs' fixed point
    is near-exact, yet the matcher's answer has a lower matching cost and a higher held-out score."""
    from eval.experiments.matcher_ceiling import run

    r = run(n=2000, dim=128, noise=2.0)
    assert r["truth"]["accuracy"] > 0.99 and 0.8 < r["found"]["accuracy"] < 0.95
    assert r["found"]["cost"] < r["truth"]["cost"] and r["found"]["heldout"] > r["truth"]["heldout"]
    assert r["data_prefers_found"]


def test_paired_column_fits_on_a_fresh_draw_of_the_same_problem():
    """The ceiling experiment's 'paired' column: a rotation from known pairs of a fresh draw (same basis and
    Q) is exact at low noise, far below the true rotation with few pairs at high noise, and near it with many."""
    import numpy as np

    from eval.experiments.matcher_ceiling import paired_accuracy
    from eval.matcher_bench import oracle

    X, Y, true, Q = make_problem(300, 16, noise=0.05, seed=3)
    X2, Y2, _, Q2 = make_problem(300, 16, noise=0.05, seed=3, draw_seed=7)
    assert np.array_equal(Q, Q2) and not np.array_equal(X, X2)
    assert paired_accuracy(X, Y, true, 300, 16, 0.05, 3) == 1.0
    X, Y, true, Q = make_problem(400, 32, noise=2.0, seed=3)
    truth = oracle(X, Y, true, Q)["assignment"]
    assert paired_accuracy(X, Y, true, 100, 32, 2.0, 3) < truth - 0.1
    assert abs(paired_accuracy(X, Y, true, 4000, 32, 2.0, 3) - truth) < 0.03


def test_soft_em_and_free_energy_known_answers():
    """Identical clouds: the identity has free energy ~0 and a random rotation far more; EM with the matching
    summed out, started near the truth of an easy problem, ends on the exact matching."""
    import numpy as np
    from scipy.linalg import expm

    from alignment.matching import prepare, weighted_procrustes
    from eval.experiments.matcher_ceiling import free_energy, soft_em
    from eval.matcher_bench import oracle

    rng = np.random.default_rng(0)
    A = rng.standard_normal((60, 4))
    Rr = np.linalg.qr(rng.standard_normal((4, 4)))[0]
    assert abs(free_energy(A, A, np.eye(4), 1e-3)) < 1e-3
    assert free_energy(A, A, Rr, 1e-3) > 0.1

    X, Y, true, _ = make_problem(300, 16, noise=0.05, seed=1)
    prep = prepare(X, Y, None, True)
    ok = true >= 0
    R0 = weighted_procrustes(prep.A[ok], prep.B[true[ok]])
    S = rng.standard_normal((16, 16))
    R0 = R0 @ expm(0.15 * (S - S.T))                 # a rotation nudged off the truth: it mismatches rows
    assert oracle(prep.A, prep.B, true, R0)["assignment"] < 1.0
    R = soft_em(prep.A, prep.B, R0, tau=0.01, iters=10)
    assert oracle(prep.A, prep.B, true, R)["assignment"] == 1.0
