"""The rotation registry: every kind defined once, fitted through one interface, keyed as before."""
import numpy as np
import pytest

from captioner import rotations
from captioner.errors import CaptionerError
from captioner.rotations import ArraySource, Fitted, RotationKind, get_kind, key_params


def _rotated(n=200, d=16, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * (1.0 / np.arange(1, d + 1))  # a power-law spectrum: distinct axes
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return X.astype(np.float32), (X @ Q).astype(np.float32), Q


def test_every_kind_is_complete_and_the_lists_read_the_registry():
    assert rotations.ALL == ["paired", "pairfree", "head", "ridge", "random"]
    assert rotations.PUBLIC == ["paired", "pairfree", "head"]
    for k in rotations.KINDS.values():
        assert k.label and k.pairing and callable(k.fit)
        assert k.uses_pairs == k.pairing.startswith("train")
    from captioner.evaluation.runs import ROTATION_CHOICES, ZEROSHOT_MODES
    from captioner.evaluation.zeroshot import MODES

    assert ROTATION_CHOICES == [*rotations.ALL, "text"] and list(MODES) == [*rotations.ALL, "cluster"]
    assert ZEROSHOT_MODES == list(MODES)


def test_aliases_and_unknown_names():
    assert get_kind("procrustes") is get_kind("paired")
    with pytest.raises(CaptionerError, match="unknown rotation 'nope'; choose one of paired, pairfree"):
        get_kind("nope")
    with pytest.raises(CaptionerError, match="has no option 'alpha'"):
        get_kind("paired").options(alpha=1.0)


def test_cache_keys_are_those_the_pipeline_always_used():
    # the artifact names of maps fitted before the registry existed must stay the same
    assert key_params("paired") == {} and key_params("ridge") == {}
    # the pair-free map's name carries the matcher's answer version: a map from an older matcher is refitted
    assert key_params("pairfree", max=2000) == {"max": 2000, "seed": 0, "matcher_version": 5}
    assert key_params("random") == {"seed": 0}
    # the head map gained the class query (query_weight): a new map, so a new name on purpose
    assert key_params("head") == {"temperature": 4.0, "prompt": "a photo of a {c}.", "text_mean": "bank",
                                  "query_weight": 1.0}
    assert key_params("pairfree", max=500, progress=True) == {"max": 500, "seed": 0,  # progress changes nothing
                                                              "matcher_version": 5}
    assert key_params("paired", scale=True) == {"scale": True}


def test_paired_and_pairfree_recover_a_known_rotation():
    X, Y, Q = _rotated()
    src = ArraySource({"note": "t"}, X_pairs=X, Y_pairs=Y)
    m = get_kind("paired").fit(src, **get_kind("paired").options()).map
    np.testing.assert_allclose(m.transform(X), Y, atol=1e-4)
    assert m.meta["pairing"] == "200 image-caption pairs" and m.meta["note"] == "t"
    # pair-free: the same clouds as two unlinked sets; the matcher shuffles them apart itself
    fitted = get_kind("pairfree").fit(ArraySource({}, X=X, Y=Y), **get_kind("pairfree").options())
    assert np.abs(fitted.map.transform(X) - Y).max() < 1e-3
    res, xi, yi = fitted.extra["result"], fitted.extra["xi"], fitted.extra["yi"]
    assert (yi[res.perm] == xi).all()  # every image row matched to its own caption row
    assert fitted.map.meta["pairfree"]["n_images"] == 200


def test_ridge_and_random_fit_through_the_registry():
    X, Y, _ = _rotated(seed=1)
    m = get_kind("ridge").fit(ArraySource({}, X_pairs=X, Y_pairs=Y), alpha=1e-6).map
    np.testing.assert_allclose(m.transform(X), Y, atol=1e-3)
    r = get_kind("random").fit(ArraySource({}, X=X, Y=Y), seed=3, dim=None).map
    W = r.matrix()
    np.testing.assert_allclose(W.T @ W, np.eye(16), atol=1e-5)  # orthogonal, but not the answer
    assert np.abs(r.transform(X) - Y).mean() > 0.01
    with pytest.raises(CaptionerError, match="needs image-caption pairs"):
        get_kind("paired").fit(ArraySource({}, X=X, Y=Y))


def test_a_new_kind_is_one_entry(monkeypatch, captioner_home):
    """Registering a kind is all it takes for the pipeline to fit, cache and serve it."""
    from alignment.procrustes import fit_procrustes
    from tests.fakes import install_fake_encoders
    from tests.test_captioner_pipeline import Pattern, pipe

    install_fake_encoders(monkeypatch)

    calls = []

    def fit_swapped(src, flip=False):
        calls.append(flip)
        X, Y = src.pairs()
        return Fitted(fit_procrustes(X, Y, **src.meta))

    kind = RotationKind("swapped", "test kind", "train image-caption pairs", True, False, fit_swapped,
                        {"flip": False})
    monkeypatch.setitem(rotations.KINDS, "swapped", kind)
    p = pipe()
    out = p.caption([Pattern(3)()], top_k=1, rotation="swapped", decode=False)
    assert out[0]["caption"] == "a yellow banana."  # fitted on the pairs, as paired is
    assert calls == [False] and p.rotation("swapped") is p.rotation("swapped")
    assert [f.name.split("-")[0] for f in (captioner_home / "rotations").glob("*.safetensors")] == ["swapped"]


def test_a_new_matcher_version_renames_the_pairfree_map_only(monkeypatch):
    import alignment.pairfree as pf

    before = {k: key_params(k) for k in ("paired", "pairfree", "head", "random")}
    monkeypatch.setattr(pf, "MATCHER_VERSION", pf.MATCHER_VERSION + 1)
    after = {k: key_params(k) for k in before}
    assert after["pairfree"]["matcher_version"] == before["pairfree"]["matcher_version"] + 1
    assert all(after[k] == before[k] for k in ("paired", "head", "random"))
