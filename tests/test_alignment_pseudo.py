"""alignment.pseudo: the classifier-head pseudo-pair rotation (known answers and bad input)."""
import numpy as np
import pytest

from alignment.errors import AlignmentError
from alignment.pseudo import fit_head_rotation, pseudo_targets, softmax


def test_targets_are_the_softmax_mixture_of_normalised_class_embeddings():
    logits = np.array([[0.0, np.log(3.0)], [2.0, 2.0]])
    E = np.array([[2.0, 0.0, 0.0], [0.0, 0.0, 5.0]])  # normalised inside: e0 = x, e1 = z
    T = pseudo_targets(logits, E, temperature=1.0)
    np.testing.assert_allclose(T, [[0.25, 0, 0.75], [0.5, 0, 0.5]], atol=1e-6)
    # temperature 2 halves the logits: p = softmax(0, log(3)/2) = (1, sqrt 3) / (1 + sqrt 3)
    T2 = pseudo_targets(logits, E, temperature=2.0)
    np.testing.assert_allclose(T2[0], [1 / (1 + 3 ** 0.5), 0, 3 ** 0.5 / (1 + 3 ** 0.5)], atol=1e-6)
    np.testing.assert_allclose(softmax([[1000.0, 1000.0]]), [[0.5, 0.5]])  # stable for large logits


def test_a_confident_head_recovers_the_rotation():
    rng = np.random.default_rng(1)
    C, D = 12, 24
    E = np.linalg.qr(rng.standard_normal((D, C)))[0].T            # (C, D) orthonormal class embeddings
    Q = np.linalg.qr(rng.standard_normal((D, D)))[0]
    labels = rng.integers(0, C, 300)
    X = (E[labels] + 0.01 * rng.standard_normal((300, D))) @ Q.T  # images: rotated class embedding + noise
    logits = 40.0 * np.eye(C)[labels]
    rot = fit_head_rotation(X, logits, E, temperature=1.0)
    assert rot.method == "head" and rot.meta["fit"]["head"]["classes"] == C
    Z = rot.transform(X)
    assert np.abs(Z - E[labels]).max() < 0.05  # the noise is 0.01 per coordinate
    assert (np.argmax(Z @ E.T, 1) == labels).all()
    # text_mean moves where the rotated cloud is centred, nothing else
    mu = np.full(D, 0.5)
    rot2 = fit_head_rotation(X, logits, E, temperature=1.0, text_mean=mu)
    np.testing.assert_allclose(rot2.transform(X) - rot2.mean_y, Z - rot.mean_y, atol=1e-6)
    np.testing.assert_allclose(rot2.mean_y, mu)


def test_bad_input_is_refused_with_a_message():
    X = np.random.default_rng(0).standard_normal((10, 4))
    E = np.eye(3, 5)
    with pytest.raises(AlignmentError, match="3 class embeddings"):
        fit_head_rotation(X, np.zeros((10, 4)), E)
    with pytest.raises(AlignmentError, match="rows of logits"):
        fit_head_rotation(X, np.zeros((9, 3)), E)
    with pytest.raises(AlignmentError, match="temperature"):
        pseudo_targets(np.zeros((2, 3)), E, temperature=0)
    with pytest.raises(AlignmentError, match="text_mean"):
        fit_head_rotation(X, np.random.default_rng(1).standard_normal((10, 3)), E, text_mean=np.zeros(4))
    with pytest.raises(AlignmentError):
        pseudo_targets(np.full((2, 3), np.nan), E)
