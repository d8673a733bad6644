"""Procrustes, ridge and random maps: known answers, persistence and refusal on mismatch."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.linalg

from alignment.errors import AlignmentError, MismatchError
from alignment.maps import LinearMap, RidgeMap, Rotation, load_map
from alignment.procrustes import (
    fit_procrustes,
    fit_random,
    fit_ridge,
    orthogonal_procrustes,
    random_orthogonal,
)

FP_IMG = {"name": "efficientnet-lite0", "modality": "image", "dim": 12, "pooling": "mean", "weights_hash": "aa"}
FP_TXT = {"name": "minilm-l6", "modality": "text", "dim": 12, "pooling": "mean", "weights_hash": "bb"}


def test_random_rotation_recovered_to_1e5_with_offsets(rng):
    X = rng.standard_normal((200, 12))
    Q = random_orthogonal(12, seed=3)
    Y = (X + 5.0) @ Q - 2.0  # different means on the two sides: centring must remove them
    rot = fit_procrustes(X, Y)
    assert np.abs(rot.R - Q).max() < 1e-5
    assert np.abs(rot.transform(X) - Y).max() < 1e-5
    assert rot.meta["fit"]["r2"] == pytest.approx(1.0, abs=1e-10)
    assert isinstance(rot, Rotation) and rot.orthogonal


def test_scale_recovered_and_matches_scipy_without_centering(rng):
    X = rng.standard_normal((100, 6))
    Q = random_orthogonal(6, seed=1)
    rot = fit_procrustes(X, 2.5 * X @ Q, scale=True)
    assert rot.scale == pytest.approx(2.5, abs=1e-10)
    assert np.abs(rot.R - Q).max() < 1e-8
    Y = X @ Q + 0.3 * rng.standard_normal(X.shape)
    R_ours = fit_procrustes(X, Y, center=False).R
    R_scipy, _ = scipy.linalg.orthogonal_procrustes(X, Y)
    assert np.abs(R_ours - R_scipy).max() < 1e-10
    R2, _ = orthogonal_procrustes(X, Y)
    assert np.abs(R2 - R_scipy).max() < 1e-10


def test_shared_dimension_pca_and_learned(rng):
    # X spans 12 dims but only 5 carry variance that Y keeps; Y = X W0 with W0 (12, 5) orthonormal columns
    N = 300
    G = rng.standard_normal((N, 12))
    X, _ = np.linalg.qr(G - G.mean(0))  # centred, X^T X = I: the learned map is then exactly W0
    W0, _ = np.linalg.qr(rng.standard_normal((12, 5)))
    Y = X @ W0
    learned = fit_procrustes(X, Y, shared="learned")
    assert learned.R.shape == (12, 5) and learned.proj_x is None
    assert np.abs(learned.R - W0).max() < 1e-8
    # PCA route: when X's variance lies in a 5-d subspace, both PCA bases span the matched subspaces
    Xl = (rng.standard_normal((N, 5)) * [5, 4, 3, 2, 1]) @ W0.T + 1e-6 * rng.standard_normal((N, 12))
    rot = fit_procrustes(Xl, Xl @ W0, dim=5)
    assert rot.proj_x.shape == (12, 5) and rot.proj_y.shape == (5, 5) and rot.dim == 5
    assert np.abs(rot.transform(Xl) - Xl @ W0).max() < 1e-4
    assert rot.meta["fit"]["shared"] == "pca"


def test_transform_checks_dimension_and_accepts_torch(rng):
    import torch

    X = rng.standard_normal((50, 12))
    rot = fit_procrustes(X, X @ random_orthogonal(12), x_encoder=FP_IMG)
    with pytest.raises(AlignmentError, match=r"takes 12-dimensional image embeddings.*efficientnet-lite0.*\(3, 7\)"):
        rot.transform(np.zeros((3, 7)))
    with pytest.raises(AlignmentError, match="NaN"):
        rot.transform(np.full((2, 12), np.nan))
    t = torch.from_numpy(X[:4].astype(np.float32))
    out = rot.transform(t)
    assert isinstance(out, torch.Tensor) and out.shape == (4, 12) and out.dtype == torch.float32
    assert np.abs(out.numpy() - rot.transform(X[:4])).max() < 1e-4
    back = rot.inverse_transform(rot.transform(X[:4]))
    assert np.abs(back - X[:4]).max() < 1e-8


def test_ridge_hand_computed_and_exact_linear_map(rng):
    X = np.array([[1.0], [2.0], [3.0]])
    Y = np.array([[2.0], [4.0], [6.0]])
    # centred x = (-1, 0, 1), y = (-2, 0, 2): W = sum(xy) / (sum(x^2) + alpha) = 4 / (2 + 2) = 1
    m = fit_ridge(X, Y, alpha=2.0)
    assert isinstance(m, RidgeMap) and not m.orthogonal
    assert m.R[0, 0] == pytest.approx(1.0, abs=1e-6)
    assert m.transform(np.array([[2.0]]))[0, 0] == pytest.approx(4.0, abs=1e-5)  # the means map to each other
    W = rng.standard_normal((8, 5))
    Xb = rng.standard_normal((100, 8))
    mb = fit_ridge(Xb, Xb @ W + 3.0, alpha=1e-9)
    assert np.abs(mb.R - W).max() < 1e-5
    auto = fit_ridge(Xb, Xb @ W + 0.5 * rng.standard_normal((100, 5)))  # alpha by leave-one-out
    assert auto.meta["fit"]["alpha"] > 0 and "loo_mse" in auto.meta["fit"]
    assert np.abs(auto.R - W).max() < 0.3


def test_random_rotation_floor_is_orthogonal_and_seeded(rng):
    X, Y = rng.standard_normal((40, 10)), rng.standard_normal((30, 6))
    r1, r2, r3 = fit_random(X, Y, seed=1), fit_random(X, Y, seed=1), fit_random(X, Y, seed=2)
    assert r1.R.shape == (6, 6) and np.abs(r1.R.T @ r1.R - np.eye(6)).max() < 1e-10
    assert np.array_equal(r1.R, r2.R) and not np.allclose(r1.R, r3.R)
    assert r1.transform(X).shape == (40, 6)


@pytest.mark.parametrize("suffix", ["", ".safetensors", ".npz"])
def test_save_load_round_trip(tmp_path, rng, suffix):
    X = rng.standard_normal((60, 12))
    rot = fit_procrustes(X, X @ random_orthogonal(12), x_encoder=FP_IMG, y_encoder=FP_TXT,
                         datasets={"image": "tuxpaint/train"})
    path = rot.save(tmp_path / f"rot{suffix}")
    assert path.exists() and path.with_suffix(".json").exists()
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["method"] == "procrustes" and meta["dim_x"] == 12 and meta["x_encoder"]["name"] == "efficientnet-lite0"
    assert meta["datasets"] == {"image": "tuxpaint/train"} and "created" in meta
    back = LinearMap.load(tmp_path / "rot" if suffix != ".npz" else path, x_encoder=FP_IMG, y_encoder=FP_TXT)
    assert type(back) is Rotation and back.meta["fit"]["n_pairs"] == 60
    assert np.array_equal(back.transform(X), rot.transform(X))
    ridge = fit_ridge(X, X[:, :5], alpha=1.0)
    ridge.save(tmp_path / "ridge")
    assert type(load_map(tmp_path / "ridge.json")) is RidgeMap


def test_load_refuses_wrong_encoder_dim_and_damage(tmp_path, rng):
    X = rng.standard_normal((60, 12))
    fit_procrustes(X, X @ random_orthogonal(12), x_encoder=FP_IMG, y_encoder=FP_TXT).save(tmp_path / "r")
    with pytest.raises(MismatchError, match=r"image encoder 'efficientnet-lite0'.*name 'efficientnet-lite0' vs 'other'"):
        Rotation.load(tmp_path / "r", x_encoder={**FP_IMG, "name": "other"})
    with pytest.raises(MismatchError, match=r"text encoder.*weights_hash 'bb' vs 'cc'"):
        Rotation.load(tmp_path / "r", y_encoder={**FP_TXT, "weights_hash": "cc"})
    with pytest.raises(MismatchError, match=r"12-dimensional text embeddings.*not 384-dimensional"):
        Rotation.load(tmp_path / "r", y_dim=384)
    assert isinstance(MismatchError("x"), ValueError)
    blob = bytearray((tmp_path / "r.safetensors").read_bytes())
    blob[-1] ^= 0xFF
    (tmp_path / "r.safetensors").write_bytes(bytes(blob))
    with pytest.raises(AlignmentError, match="damaged"):
        Rotation.load(tmp_path / "r")
    with pytest.raises(AlignmentError, match="no saved map"):
        Rotation.load(tmp_path / "missing")


@pytest.mark.parametrize("X,Y,msg", [
    (np.zeros((0, 4)), np.zeros((0, 4)), "empty"),
    (np.ones((5, 4)), np.ones((5, 4)), "identical"),
    (np.r_[np.random.default_rng(0).standard_normal((4, 3)), [[np.nan, 0, 0]]], np.ones((5, 3)), "NaN or inf"),
    (np.random.default_rng(0).standard_normal((5, 3)), np.random.default_rng(1).standard_normal((4, 3)), "rows"),
    (np.zeros(5), np.zeros(5), "2-D"),
])
def test_bad_input_messages(X, Y, msg):
    with pytest.raises(AlignmentError, match=msg):
        fit_procrustes(X, Y)


def test_dim_above_smaller_side_refused(rng):
    with pytest.raises(AlignmentError, match="exceeds"):
        fit_procrustes(rng.standard_normal((20, 8)), rng.standard_normal((20, 4)), dim=6)
