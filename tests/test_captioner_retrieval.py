"""Caption bank and retrieval: exact answers on constructed embeddings; the bank never holds test captions."""
import os

import numpy as np
import pytest

from captioner.bank import bank_from_arrays, build_bank, l2n, normalize_caption
from captioner.datasets import CaptionDataset, Sample
from captioner.errors import CaptionerError
from captioner.retrieval import Identity, RetrievalCaptioner, onto_manifold, project, retrieve
from tests.fakes import FakeTextEncoder

HAS_TUX = os.path.isdir("/usr/share/tuxpaint/stamps")
FP = {"name": "fake-text", "dim": 16, "pooling": "hash", "weights_hash": "x"}
TEXTS = ["a koala.", "a red fire truck.", "a green frog on a leaf.", "a yellow banana.", "a whale.",
         "a cup of coffee.", "a snowman.", "a rocket."]


def make_bank(rng, D=16):
    E = l2n(rng.standard_normal((len(TEXTS), D)))
    return bank_from_arrays(TEXTS, E, FP), E


class Rot:
    """transform(X) = X @ Q.T: image space is text space rotated by Q, so this undoes it."""

    def __init__(self, Q):
        self.Q = Q

    def transform(self, X):
        return X @ self.Q


def test_identity_rotation_returns_the_exact_caption(rng):
    bank, E = make_bank(rng)
    idx, sc = retrieve(E, bank, top_k=3)
    assert idx[:, 0].tolist() == list(range(len(TEXTS)))
    np.testing.assert_allclose(sc[:, 0], 1.0, atol=1e-6)  # a bank row against itself: centred cosine 1
    assert (np.diff(sc, axis=1) <= 1e-7).all()  # best first
    out = RetrievalCaptioner(bank, Identity()).caption(E[[3]], top_k=2)
    assert out[0][0]["caption"] == "a yellow banana." and out[0][0]["score"] == pytest.approx(1.0, abs=1e-6)


def test_known_rotation_is_undone_and_retrieval_finds_each_caption(rng):
    bank, E = make_bank(rng)
    Q = np.linalg.qr(rng.standard_normal((16, 16)))[0]
    X_img = E @ Q.T  # "image" embeddings: the captions' embeddings in a rotated space
    caps = RetrievalCaptioner(bank, Rot(Q)).caption(X_img, top_k=1)
    assert [c[0]["caption"] for c in caps] == TEXTS
    # without the rotation the same queries do not find their captions
    wrong = RetrievalCaptioner(bank, Identity()).caption(X_img, top_k=1)
    assert [c[0]["caption"] for c in wrong] != TEXTS


def test_top_k_is_clipped_and_ties_break_by_row():
    E = l2n(np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]))
    bank = bank_from_arrays(["a", "b", "c", "d"], E, {"name": "t", "dim": 2})
    idx, _ = retrieve(np.array([[1.0, 0.0]]), bank, top_k=10)
    assert idx.shape == (1, 4) and idx[0, :2].tolist() == [0, 1]


def test_projection_limits(rng):
    bank, E = make_bank(rng)
    # a tiny temperature selects the nearest caption's embedding, exactly
    np.testing.assert_allclose(project(E[[2]] + 1e-3, bank, temperature=1e-4), E[[2]], atol=1e-5)
    # a huge one averages the whole bank: the normalised mean
    np.testing.assert_allclose(project(E[[2]], bank, temperature=1e6), l2n(E.mean(0, keepdims=True)), atol=1e-5)
    # top_k=1 is the nearest caption at any temperature
    np.testing.assert_allclose(project(E[[5]], bank, temperature=1.0, top_k=1), E[[5]], atol=1e-6)
    with pytest.raises(CaptionerError, match="temperature"):
        project(E, bank, temperature=0)


def test_onto_manifold_keeps_direction_and_radius(rng):
    bank, E = make_bank(rng)
    mu, _, r = bank.centered()
    q = onto_manifold(E[[1]] * 7.0, bank)  # scale does not matter, direction around the mean does
    np.testing.assert_allclose(q, l2n(mu + r * l2n(E[[1]] * 7.0 - mu)), atol=1e-6)
    assert np.linalg.norm(q) == pytest.approx(1.0)


def test_bank_drops_and_refuses_test_captions(rng):
    E = l2n(rng.standard_normal((4, 8)))
    bank = bank_from_arrays(["A Koala.", "a koala", "A fire truck.", "A whale!"], E, FP,
                            exclude=["a whale", "  A  fire truck "])
    # "a koala" duplicates "A Koala." (normalised); the truck and the whale are test captions
    assert bank.texts == ["A Koala."] and bank.dropped == ["A fire truck.", "A whale!"]
    np.testing.assert_allclose(bank.E, E[[0]], atol=1e-7)
    with pytest.raises(CaptionerError, match="holds 1 caption"):
        bank.assert_excludes(["a KOALA."])
    assert normalize_caption("  A  Koala. ") == "a koala"


def test_empty_bank_is_a_clear_error(rng):
    with pytest.raises(CaptionerError, match="caption bank is empty.*2 dropped as test captions"):
        bank_from_arrays(["a cat", "a dog"], rng.standard_normal((2, 4)), FP, exclude=["a dog.", "A cat"])


def test_build_bank_through_the_cache_excludes_test_captions():
    train = CaptionDataset("toy", "train", [Sample("a", None, ["A koala."]), Sample("b", None, ["A whale."]),
                                            Sample("c", None, ["a whale"]), Sample("d", None, ["A frog."])])
    test = CaptionDataset("toy", "test", [Sample("t", None, ["a frog"])])
    enc = FakeTextEncoder(16)
    bank = build_bank(enc, [train], exclude=test.captions(), progress=False)
    assert bank.texts == ["A koala.", "A whale."] and bank.dropped == ["A frog."]
    np.testing.assert_allclose(bank.E, enc.encode(["A koala.", "A whale."]), atol=1e-6)
    calls = enc.calls
    build_bank(enc, [train], exclude=test.captions(), progress=False)
    assert enc.calls == calls  # second build: from the embedding cache


@pytest.mark.skipif(not HAS_TUX, reason="tuxpaint-stamps-default not installed")
def test_tuxpaint_bank_holds_no_test_caption():
    from captioner.datasets import get_dataset

    test = get_dataset("tuxpaint", split="test")
    bank = build_bank(FakeTextEncoder(8), [get_dataset("tuxpaint", split="train")], exclude=test.captions(),
                      progress=False)
    assert len(bank) > 300
    assert not {normalize_caption(c) for c in test.captions()} & {normalize_caption(t) for t in bank.texts}
