"""The captioner on the real offline encoders (EfficientNet-Lite0, all-MiniLM-L6-v2): slow tests."""
import os

import numpy as np
import pytest

pytestmark = pytest.mark.slow
HAS_TUX = os.path.isdir("/usr/share/tuxpaint/stamps")


def test_text_zeroshot_with_minilm_knows_a_koala_from_a_fire_truck():
    from captioner.encoders import get_encoder
    from captioner.zeroshot import ZeroShotClassifier, build_head

    enc = get_encoder("minilm-l6")
    labels = ["koala", "fire truck", "banana", "violin"]
    W = build_head(enc, labels, ["a photo of a {c}.", "a drawing of a {c}."])
    P = ZeroShotClassifier(labels, W).predict_proba(enc.encode(["A koala sleeping in a eucalyptus tree.",
                                                                 "A red engine with a ladder and a siren.",
                                                                 "A ripe yellow fruit.", "A string instrument."]))
    assert P.argmax(1).tolist() == [0, 1, 2, 3]


@pytest.mark.skipif(not HAS_TUX, reason="tuxpaint-stamps-default not installed")
def test_pipeline_on_real_encoders_fits_its_train_pairs(shared_home, monkeypatch):
    from captioner.datasets import CaptionDataset, get_dataset
    from captioner.images import load_image
    from captioner.pipeline import Pipeline

    monkeypatch.setenv("CAPTIONER_HOME", str(shared_home))
    full = get_dataset("tuxpaint", split="train")
    train = CaptionDataset("tuxpaint", "train-first60", full.samples[:60], labels=full.labels)
    p = Pipeline(progress=False, train_set=train)
    ims = [load_image(s.source) for s in train.samples[:20]]
    out = p.caption(ims, top_k=5, rotation="paired", decode=False)
    hits = [s.captions[0] in [r["caption"] for r in o["retrieved"]] for s, o in zip(train.samples, out)]
    assert np.mean(hits) >= 0.5  # Procrustes on 60 pairs: most fitted images find their caption in the top 5
    assert all(np.isfinite(r["score"]) for o in out for r in o["retrieved"])
    lab = p.classify(ims[:2], ["animal", "vehicle", "food"], top_k=3)
    assert [len(x["labels"]) for x in lab] == [3, 3]
