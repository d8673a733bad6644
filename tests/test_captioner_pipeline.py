"""The Pipeline contract (what the CLI and the demo call) on fake encoders and a synthetic train set: result
shapes, cached artifacts, and the bad-input errors."""
import numpy as np
import pytest
from PIL import Image

import captioner.encoders as encoders
from captioner.datasets import CaptionDataset, Sample
from captioner.errors import CacheMismatchError, CaptionerError
from captioner.pipeline import Pipeline
from tests.fakes import FakeImageEncoder, FakeTextEncoder

CAPTIONS = ["a koala.", "a red fire truck.", "a green frog.", "a yellow banana.", "a whale.", "a cup of coffee.",
            "a snowman.", "a rocket.", "a hat.", "a train.", "a bicycle.", "a tulip.", "a dog.", "a cat."]


class Pattern:
    """A seeded random 8x8 colour pattern, scaled up: images whose fake features are full rank."""

    def __init__(self, i):
        self.i = i
        self.__name__ = f"pattern{i}"

    def __call__(self):
        a = np.random.default_rng(self.i).integers(0, 256, (8, 8, 3), dtype=np.uint8)
        return Image.fromarray(a).resize((32, 32), Image.NEAREST)


def train_set():
    return CaptionDataset("toy", "train", [Sample(f"s{i}", Pattern(i), [c]) for i, c in enumerate(CAPTIONS)])


@pytest.fixture
def fakes(monkeypatch):
    made = {"fake-image": FakeImageEncoder(), "fake-text": FakeTextEncoder(16)}

    def get_encoder(name, device="cpu", **kw):
        if name not in made:
            raise CaptionerError(f"unknown encoder {name!r}")
        return made[name]

    monkeypatch.setattr(encoders, "get_encoder", get_encoder)
    return made


def pipe(**kw):
    kw.setdefault("exclude", ["a unicorn."])
    return Pipeline("fake-image", "fake-text", progress=False, train_set=train_set(), decoder_preset="tiny",
                    decoder_corpus="bank", **kw)


def test_caption_contract(fakes):
    p = pipe()
    ims = [Pattern(3)(), Pattern(100)()]
    out = p.caption(ims, top_k=4, rotation="paired", decode=False)
    assert len(out) == 2
    for o in out:
        assert set(o) == {"caption", "retrieved", "timings_ms"}
        assert set(o["timings_ms"]) == {"encode", "rotate_retrieve", "decode"} and o["timings_ms"]["decode"] == 0
        assert len(o["retrieved"]) == 4 and all(set(r) == {"caption", "score"} for r in o["retrieved"])
        scores = [r["score"] for r in o["retrieved"]]
        assert scores == sorted(scores, reverse=True) and all(-1 - 1e-6 <= s <= 1 + 1e-6 for s in scores)
        assert o["caption"] == o["retrieved"][0]["caption"] and o["caption"] in CAPTIONS
    assert p.rotations == ["paired", "pairfree"]
    # the paired map was fitted on these very pairs: a train image retrieves its own caption (14 pairs, 13-d)
    assert out[0]["caption"] == "a yellow banana."


def test_every_rotation_builds_and_is_cached_on_disk(fakes, captioner_home):
    p = pipe()
    for r in p.eval_rotations:
        assert len(p.caption([Pattern(1)()], top_k=1, rotation=r, decode=False)) == 1
    files = sorted(f.name.split("-")[0] for f in (captioner_home / "rotations").glob("*.safetensors"))
    assert files == ["paired", "pairfree", "random", "ridge"]
    q = pipe()
    R1, R2 = p.rotation("paired").R, q.rotation("paired").R
    np.testing.assert_array_equal(R1, R2)  # loaded from the file, not refitted
    assert q.rotation("pairfree").meta["pairing"].startswith("none")


def test_classify_contract(fakes):
    p = pipe()
    out = p.classify([Pattern(0)()], ["koala", "fire truck", "frog"], top_k=2)
    assert len(out) == 1 and len(out[0]["labels"]) == 2
    probs = [x["prob"] for x in out[0]["labels"]]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6
    assert {x["label"] for x in out[0]["labels"]} <= {"koala", "fire truck", "frog"}
    assert set(out[0]["timings_ms"]) >= {"encode", "rotate_retrieve"}


def test_alignment_report_contract(fakes):
    rep = pipe().alignment_report(n_perm=3)
    assert rep["image_encoder"] == "fake-image" and rep["text_encoder"] == "fake-text"
    assert rep["n_pairs"] == len(CAPTIONS)
    for m in ("mutual_knn", "cka"):
        assert {"score", "null_mean", "null_std"} <= set(rep["metrics"][m])
    assert rep["scaling_plot"] is None


def test_rotation_fitted_for_other_encoders_is_refused(fakes, tmp_path):
    from alignment.procrustes import fit_procrustes

    rng = np.random.default_rng(0)
    other = {"name": "efficientnet-lite0", "dim": 15, "pooling": "mean", "weights_hash": "abc", "modality": "image"}
    m = fit_procrustes(rng.standard_normal((30, 15)), rng.standard_normal((30, 16)), x_encoder=other,
                       y_encoder=fakes["fake-text"].fingerprint())
    path = m.save(tmp_path / "other")
    p = pipe(rotation_files={"paired": str(path)})
    with pytest.raises(CacheMismatchError, match="efficientnet-lite0"):
        p.caption([Pattern(0)()], decode=False)


def test_bad_inputs(fakes):
    p = pipe()
    with pytest.raises(CaptionerError, match="unknown rotation 'sideways'"):
        p.caption([Pattern(0)()], rotation="sideways")
    with pytest.raises(CaptionerError, match="no images given"):
        p.caption([], decode=False)
    with pytest.raises(CaptionerError, match="duplicate label"):
        p.classify([Pattern(0)()], ["cat", "dog", "cat"])
    with pytest.raises(CaptionerError, match="at least two classes"):
        p.classify([Pattern(0)()], ["cat"])
    with pytest.raises(CaptionerError, match="caption bank is empty"):
        pipe(exclude=CAPTIONS).caption([Pattern(0)()], decode=False)


def test_default_is_one_instance_per_arguments(fakes):
    a = Pipeline.default(image_encoder="fake-image", text_encoder="fake-text", progress=False)
    assert Pipeline.default(image_encoder="fake-image", text_encoder="fake-text", progress=False) is a
    assert Pipeline.default(image_encoder="fake-image", text_encoder="fake-text", progress=True) is not a


@pytest.mark.slow
def test_decoded_caption_with_a_tiny_decoder(fakes, captioner_home):
    p = pipe(beam=1, decoder_overrides={"steps": 30})
    out = p.caption([Pattern(2)()], top_k=2, rotation="paired", decode=True)
    assert isinstance(out[0]["caption"], str) and out[0]["caption"]
    assert out[0]["timings_ms"]["decode"] > 0
    assert list((captioner_home / "checkpoints").glob("decoder-fake-text-tiny-*.pt"))
    p.warmup()
