"""Zero-shot head and classifier: known answers on constructed embeddings; bad label lists; the pair-free
cluster matcher recovers a planted class permutation."""
import numpy as np
import pytest

from captioner.bank import l2n
from captioner.errors import CaptionerError
from captioner.evaluation.zeroshot import topk_accuracy
from captioner.zeroshot import (
    PrototypeClassifier,
    ZeroShotClassifier,
    build_head,
    check_labels,
    class_prompts,
    cluster_match,
    head_from_embeddings,
    predict_proba,
    topk,
)
from tests.fakes import FakeTextEncoder


def test_head_is_mean_over_templates_renormalised():
    # class 0: prompts along x (length 2) and y (length 1): each is normalised first, so the mean is
    # (0.5, 0.5) whatever the lengths, renormalised to (1, 1)/sqrt(2); class 1: (-3, 0) and (0, -1) -> -(1, 1)/sqrt(2)
    E = np.array([[[2.0, 0.0], [0.0, 1.0]], [[-3.0, 0.0], [0.0, -1.0]]])
    s = 1 / np.sqrt(2)
    np.testing.assert_allclose(head_from_embeddings(E), [[s, s], [-s, -s]], atol=1e-7)
    # the flat form with per-class counts: class 0 has 3 prompts, class 1 has 1
    flat = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 5.0], [0.0, -2.0]])
    want0 = np.array([2 / 3, 1 / 3]) / np.linalg.norm([2 / 3, 1 / 3])
    np.testing.assert_allclose(head_from_embeddings(flat, [3, 1]), [want0, [0.0, -1.0]], atol=1e-7)


def test_build_head_embeds_every_prompt_and_averages():
    enc = FakeTextEncoder(16)
    templates = ["a photo of a {c}.", "a drawing of a {c}.", "{c}"]
    W = build_head(enc, ["cat", "fire truck"], templates)
    want = [l2n(l2n(enc.encode([t.replace("{c}", c) for t in templates])).mean(0, keepdims=True))[0]
            for c in ("cat", "fire truck")]
    np.testing.assert_allclose(W, np.stack(want), atol=1e-6)
    # many prompts go through the embedding cache, and give the same head
    many = [f"picture {i} of a {{c}}." for i in range(40)]
    W1 = build_head(enc, ["cat", "dog"], many)
    calls = enc.calls
    W2 = build_head(enc, ["cat", "dog"], many)
    assert enc.calls == calls
    np.testing.assert_allclose(W1, W2, atol=0)
    np.testing.assert_allclose(W1[0], l2n(l2n(enc.encode([p.replace("{c}", "cat") for p in many])).mean(0)), atol=1e-6)


def test_prompts_from_templates_and_definitions():
    p = class_prompts(["koala"], ["a photo of a {c}."], ["an arboreal marsupial."], mode="both")
    assert p == [["a photo of a koala.", "a photo of a koala, an arboreal marsupial."]]
    assert class_prompts(["koala"], ["a {c}"], [None], mode="definitions") == [["a koala"]]


def test_classifier_known_answer():
    W = np.eye(3)
    P = predict_proba(np.array([[2.0, 0.0, 0.0], [0.0, 0.0, 0.1]]), W, logit_scale=10.0)
    e = np.exp(10.0)
    np.testing.assert_allclose(P[0], [e / (e + 2), 1 / (e + 2), 1 / (e + 2)], rtol=1e-6)
    assert topk(P, 2)[1].tolist() == [2, 0]  # ties between classes 0 and 1: the lower index first
    clf = ZeroShotClassifier(["a", "b", "c"], W, mu=np.array([5.0, 5.0, 0.0]))
    # centring by mu first: (6, 5, 0) - mu = (1, 0, 0) -> class a
    assert clf.predict_proba(np.array([[6.0, 5.0, 0.0]])).argmax() == 0


def test_topk_accuracy_known_answer():
    S = np.array([[0.9, 0.1, 0.0], [0.2, 0.3, 0.5], [0.1, 0.8, 0.1]])
    assert topk_accuracy(S, np.array([0, 1, 2]), ks=(1, 2)) == {"top1": pytest.approx(1 / 3),
                                                                "top2": pytest.approx(2 / 3)}


@pytest.mark.parametrize("labels, msg", [
    (["cat", "Cat "], "duplicate label 'Cat'"),
    (["cat"], "at least two classes"),
    (["cat", ""], "empty label"),
    ("cat,,dog", "empty label"),
])
def test_bad_label_lists(labels, msg):
    with pytest.raises(CaptionerError, match=msg):
        check_labels(labels)


def test_check_labels_strips_and_splits():
    assert check_labels(" cat , fire  truck,dog") == ["cat", "fire truck", "dog"]


def test_cluster_match_recovers_a_planted_class_permutation():
    pytest.importorskip("alignment.qap")
    rng = np.random.default_rng(3)
    C, per, D_img, D_txt = 6, 20, 10, 12
    centres = rng.standard_normal((C, D_img)) * 3
    X = np.concatenate([c + 0.05 * rng.standard_normal((per, D_img)) for c in centres])
    cluster_of = np.repeat(np.arange(C), per)
    true = rng.permutation(C)  # cluster i is class true[i]
    # text side: the same directions, rotated into more dimensions, the classes in another order
    Q = np.linalg.qr(rng.standard_normal((D_txt, D_txt)))[0][:, :D_img]  # (D_txt, D_img) orthonormal columns
    W = np.zeros((C, D_txt))
    W[true] = l2n(centres) @ Q.T
    res = cluster_match(X, W, seed=0)
    pred = res["scores"].argmax(1)
    assert (pred == true[cluster_of]).all()
    assert sorted(res["perm"].tolist()) == list(range(C))
    with pytest.raises(CaptionerError, match="at least as many images"):
        cluster_match(X[:3], W)


def _biased_two_class_world(seed: int):
    """Two image clusters; the text vector of class a leans towards class b, so the text alone takes about a
    fifth of the b images for a."""
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1], 200)
    centres = np.array([[1.0, 0.3, 0, 0], [0.3, 1.0, 0, 0]])
    X = (centres[y] + 0.25 * rng.standard_normal((400, 4))).astype(np.float32)
    return X, y, np.array([[1.0, 1.2, 0, 0], [0, 1, 0, 0]], np.float32)


def test_prototypes_from_an_unlabelled_pool_correct_a_biased_text_head():
    X, y, W = _biased_two_class_world(0)
    held, y_held, _ = _biased_two_class_world(1)
    base = ZeroShotClassifier(["a", "b"], W)
    assert 0.7 < (base.predict_proba(held).argmax(1) == y_held).mean() < 0.85
    clf = PrototypeClassifier(base, X)  # the pool's labels are never given
    assert (clf.predict_proba(held).argmax(1) == y_held).mean() > 0.95
    np.testing.assert_allclose(clf.predict_proba(held).sum(1), 1.0, atol=1e-5)
    # weight 0: the base classifier exactly
    np.testing.assert_allclose(PrototypeClassifier(base, X, weight=0.0).predict_proba(held),
                               base.predict_proba(held), atol=1e-6)


@pytest.mark.parametrize("pool, kw, msg", [
    (np.zeros((1, 4), np.float32), {}, "N >= 2"),
    (np.full((3, 4), np.nan, np.float32), {}, "finite"),
    (np.ones((3, 4), np.float32), {"weight": -1.0}, "weight must be >= 0"),
    (np.ones((3, 4), np.float32), {"rounds": 0}, "rounds >= 1"),
])
def test_prototype_bad_input(pool, kw, msg):
    base = ZeroShotClassifier(["a", "b"], np.eye(2, 4, dtype=np.float32))
    with pytest.raises(CaptionerError, match=msg):
        PrototypeClassifier(base, pool, **kw)


def test_cluster_mode_refuses_prototypes():
    from captioner.evaluation.zeroshot import evaluate_zeroshot

    with pytest.raises(CaptionerError, match="cluster mode has none"):
        evaluate_zeroshot(object(), "tuxpaint", "cluster", prototypes=True)


def test_caption_described_classes_known_answer():
    """``described_by_captions``: each class's prompt direction plus its train captions' mean direction, both
    around the bank mean; captions missing from the bank (the excluded test captions) do not count, and a class
    with no caption keeps its prompt direction."""
    from types import SimpleNamespace as S

    from captioner.bank import CaptionBank
    from captioner.zeroshot import described_by_captions

    rng = np.random.default_rng(0)
    E = l2n(rng.standard_normal((4, 8))).astype(np.float32)
    bank = CaptionBank(["a red car.", "a blue car.", "a cat.", "a kite."], E, {})
    mu, Ec, _ = bank.centered()
    W = l2n(rng.standard_normal((3, 8))).astype(np.float32)
    samples = [S(label="car", captions=["A red car."]), S(label="car", captions=["a blue car", "a bus."]),
               S(label="cat", captions=["a cat.", "a test caption the bank excludes."]), S(label="owl", captions=[])]
    V = described_by_captions(W, ["car", "cat", "owl"], samples, bank, weight=1.0)
    want_car = l2n(l2n(W[0] - mu) + l2n(Ec[0] + Ec[1]))
    want_cat = l2n(l2n(W[1] - mu) + Ec[2])
    assert np.allclose(V[0], want_car, atol=1e-5) and np.allclose(V[1], want_cat, atol=1e-5)
    assert np.allclose(V[2], l2n(W[2] - mu), atol=1e-5)  # no caption: the prompt direction alone
    # weight 0 is the prompts alone, around the bank mean
    assert np.allclose(described_by_captions(W, ["car", "cat", "owl"], samples, bank, weight=0.0), l2n(W - mu),
                       atol=1e-5)
    with pytest.raises(CaptionerError, match="do not fit 2 labels"):
        described_by_captions(W, ["car", "cat"], samples, bank)


def test_caption_prompts_need_a_captioned_dataset():
    from captioner.evaluation.zeroshot import evaluate_zeroshot

    with pytest.raises(CaptionerError, match="needs a dataset whose train captions carry its labels"):
        evaluate_zeroshot(object(), "imagenet100", "paired", root="/nonexistent", prompts="captions")
