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


def test_head_query_map_adds_the_class_query_and_survives_a_round_trip(tmp_path):
    """Known answer: a one-hot head on class c gives mean_y + |z| * unit(unit(z) + w * unit(e_c - mean_y));
    weight 0 is the rotation itself; saved and loaded, the map is the same map; shapes that do not fit fail."""
    from alignment.maps import HeadQueryMap, load_map
    from alignment.pseudo import with_head_query

    rng = np.random.default_rng(3)
    D, C = 6, 3
    X = rng.standard_normal((40, D))
    rot = fit_head_rotation(X, rng.standard_normal((40, C)), rng.standard_normal((C, D)), temperature=1.0)
    E = np.eye(C, D) * 2.0                                   # unit rows after normalisation: e_c = axis c
    Wh, bh = np.zeros((C, D)), np.array([0.0, 60.0, 0.0])    # every image: class 1 with probability ~1
    m = with_head_query(rot, Wh, bh, E, weight=0.5)
    assert isinstance(m, HeadQueryMap) and m.meta["head_query"] == {"weight": 0.5, "temperature": 1.0}
    z = rot.transform(X[:5], add_mean=False)
    c = np.eye(C, D)[1] - rot.mean_y
    u = z / np.linalg.norm(z, axis=1, keepdims=True) + 0.5 * c / np.linalg.norm(c)
    want = rot.mean_y + u / np.linalg.norm(u, axis=1, keepdims=True) * np.linalg.norm(z, axis=1, keepdims=True)
    np.testing.assert_allclose(m.transform(X[:5]), want, atol=1e-5)
    np.testing.assert_allclose(with_head_query(rot, Wh, bh, E, weight=0.0).transform(X[:5]), rot.transform(X[:5]),
                               atol=1e-5)
    back = load_map(m.save(tmp_path / "hq"))
    assert type(back) is HeadQueryMap and back.meta["head_query"]["weight"] == 0.5
    np.testing.assert_allclose(back.transform(X), m.transform(X), atol=1e-6)
    with pytest.raises(AlignmentError, match="do not fit"):
        with_head_query(rot, np.zeros((C, D + 1)), bh, E)
    with pytest.raises(AlignmentError, match="weight must be"):
        with_head_query(rot, Wh, bh, E, weight=-1.0)
