"""The CSLS matcher (cluster-QAP starts in the top axes + CSLS self-learning) and its held-out score."""
from __future__ import annotations

import numpy as np
import pytest

from alignment.csls import cluster_starts, heldout_score, kmeans, match_csls
from alignment.errors import AlignmentError
from alignment.matching import prepare
from alignment.pairfree import match, match_pairfree
from eval.matcher_bench import make_problem


@pytest.fixture(scope="module")
def noisy_partial():
    # noise 0.7 x rms, half of Y's rows new points: the cheap matcher stops at 81% here (oracle 96%)
    return make_problem(600, 32, noise=0.7, overlap=0.5, seed=0)


def test_csls_recovers_what_the_cheap_matcher_misses(noisy_partial):
    X, Y, true, _ = noisy_partial
    cheap = match_pairfree(X, Y)
    assert cheap.accuracy(true) < 0.85
    assert match_csls(X, Y, init=[cheap.perm]).accuracy(true) >= 0.93
    # auto refines ours' and the annealed answers and keeps the best held-out assignment score
    res = match(X, Y)  # method="auto"
    a = res.info["auto"]
    assert a["ran"][:2] == ["ours", "anneal"] and res.accuracy(true) >= 0.9
    assert a["assignment_score"][a["chosen"]] == max(a["assignment_score"].values())


def test_heldout_score_prefers_the_true_assignment(noisy_partial):
    X, Y, true, _ = noisy_partial
    prep = prepare(X, Y, None)
    rng = np.random.default_rng(0)
    wrong = rng.permutation(len(Y))
    assert heldout_score(prep.A, prep.B, true) > heldout_score(prep.A, prep.B, wrong) + 0.2


def test_kmeans_and_cluster_starts_on_separated_blobs():
    rng = np.random.default_rng(1)
    centres = rng.standard_normal((4, 3)) * 10
    Z = (centres[np.arange(200) % 4] + 0.1 * rng.standard_normal((200, 3))).astype(np.float32)
    lab, C = kmeans(Z, 4, rng)
    assert len(set(zip(lab, np.arange(200) % 4))) == 4  # each blob one cluster
    Q = np.linalg.qr(rng.standard_normal((3, 3)))[0].astype(np.float32)
    (R,) = cluster_starts(Z, Z @ Q, clusters=4, cluster_dims=3, restarts=1, bootstrap=1.0)
    assert np.abs(R - Q).max() < 0.05


def test_seeds_are_kept(noisy_partial):
    X, Y, true, _ = noisy_partial
    pairs = [(int(i), int(true[i])) for i in np.flatnonzero(true >= 0)[:5]]
    res = match_csls(X, Y, seeds=pairs, iters=3, restarts=1)
    assert all(res.perm[i] == j for i, j in pairs)


@pytest.mark.parametrize("kw, msg", [
    ({"clusters": 50}, "clusters=50 must be between 2"),
    ({"seeds": [(0, 99)]}, "names row 99 of Y"),
    ({"init": [np.zeros(5, np.int64)]}, "init assignment 0 has shape"),
])
def test_bad_arguments_fail_in_one_line(kw, msg):
    X, Y, _, _ = make_problem(30, 6, seed=2)
    with pytest.raises(AlignmentError, match=msg) as e:
        match_csls(X, Y, **kw)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("edit, msg", [("nan", "contain NaN"), ("same", "all 30 rows are identical")])
def test_bad_clouds_fail_in_one_line(edit, msg):
    X, Y, _, _ = make_problem(30, 6, seed=2)
    if edit == "nan":
        Y[3, 1] = np.nan
    else:
        Y[:] = Y[0]
    with pytest.raises(AlignmentError, match=msg) as e:
        match(X, Y, method="csls")
    assert "\n" not in str(e.value)
