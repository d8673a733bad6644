"""The classifier captioner's alternatives: class queries centred against the bank, template copies skipped."""
import numpy as np
import pytest

from captioner.bank import CaptionBank, l2n


def _world(rng, C=12, D=32):
    """Class prompt embeddings sharing a large common component, as a sentence encoder's do; a bank of one
    caption per class plus a hub caption that sits on the common component."""
    common = l2n(rng.standard_normal(D))
    T = l2n(3.0 * common + rng.standard_normal((C, D)))
    texts = [f"A photo of a class{i}." for i in range(C)] + ["A photo of an apiary."]
    E = l2n(np.vstack([T, l2n(T.mean(0) + 0.01 * rng.standard_normal(D))]))
    return T, CaptionBank(texts, E.astype(np.float32), {})


class _Pipe:
    def __init__(self, T):
        self.T = T

    def encoder(self, modality):
        return None

    def head(self, names, templates=None):
        return self.T


@pytest.fixture
def patched(monkeypatch):
    import captioner.photocaption as pc

    def use(T):
        C = len(T)
        monkeypatch.setattr(pc, "cached_head", lambda enc: (np.eye(C, dtype=np.float32), np.zeros(C, np.float32),
                                                            [f"class{i}" for i in range(C)]))
        return _Pipe(T)
    return use


def test_an_unsure_head_gets_its_likeliest_class_not_the_hub_caption(patched):
    from captioner.photocaption import classifier_queries, classifier_retrieve

    rng = np.random.default_rng(0)
    T, bank = _world(rng)
    pipe = patched(T)
    # logits: class 3 ahead of a flat rest (top probability ~0.26 of 12 classes)
    X = np.zeros((1, len(T)), np.float32)
    X[0, 3] = 1.5
    Q, names, P = classifier_queries(pipe, X)
    assert names[int(P[0].argmax())] == "class3" and P[0].max() < 0.3
    # the old, uncentred query finds the hub: it lies on the prompts' common component
    raw = (P @ T) @ bank.E.T
    assert bank.texts[int(raw[0].argmax())] == "A photo of an apiary."
    idx, sc = classifier_retrieve(Q, bank, 3)
    assert bank.texts[idx[0][0]] == "A photo of a class3." and "A photo of an apiary." not in \
        [bank.texts[j] for j in idx[0]]
    assert len(idx[0]) == 3 and sc[0] == sorted(sc[0], reverse=True)


def test_template_copies_of_one_name_are_listed_once(patched):
    from captioner.photocaption import classifier_queries, classifier_retrieve, template_core

    assert template_core("A photo of an espresso.") == template_core("An espresso.") == \
        template_core("a photo of the hard to see espresso.") == "espresso"
    assert template_core("A Vespa is a brand of motor scooter.") == "vespa is a brand of motor scooter"
    rng = np.random.default_rng(1)
    T, _ = _world(rng, C=6)
    # the bank: class 0 in three templates (near-identical embeddings), then every class once
    texts = ["A photo of a class0.", "A class0.", "a sketch of the class0."] + [f"Some class{i}." for i in range(1, 6)]
    E = l2n(np.vstack([T[0] + 0.01 * rng.standard_normal((3, T.shape[1])), T[1:]])).astype(np.float32)
    bank = CaptionBank(texts, E, {})
    pipe = patched(T)
    X = np.zeros((1, 6), np.float32)
    X[0, 0] = 3.0
    Q, _, _ = classifier_queries(pipe, X)
    with_copies, _ = classifier_retrieve(Q, bank, 3, copies=True)
    assert [bank.texts[j] for j in with_copies[0]] and all(j < 3 for j in with_copies[0])
    idx, _ = classifier_retrieve(Q, bank, 3)
    listed = [bank.texts[j] for j in idx[0]]
    assert sum(t.startswith(("A photo of a class0", "A class0", "a sketch of the class0")) for t in listed) == 1
    assert len(listed) == 3 and len({template_core(t) for t in listed}) == 3


def test_distinct_fills_from_the_skipped_when_too_few_differ():
    from captioner.retrieval import distinct

    rows, vals = distinct(np.array([[5, 6, 7]]), np.array([[0.9, 0.8, 0.7]]), lambda j: "same", 2)
    assert rows == [[5, 6]] and vals == [[0.9, 0.8]]
    rows, _ = distinct(np.array([[5, 6, 7]]), np.array([[0.9, 0.8, 0.7]]), {5: "a", 6: "a", 7: "b"}.get, 2)
    assert rows == [[5, 7]]
