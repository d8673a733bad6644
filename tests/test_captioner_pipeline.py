"""The Pipeline contract (what the CLI and the demo call) on fake encoders and a synthetic train set: result
shapes, cached artifacts, and the bad-input errors."""
import numpy as np
import pytest
from PIL import Image

from captioner.datasets import CaptionDataset, Sample
from captioner.errors import CacheMismatchError, CaptionerError
from captioner.pipeline import Pipeline
from tests.fakes import FakeImageEncoder, install_fake_encoders

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
    made = install_fake_encoders(monkeypatch)
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


def test_classify_passes_templates_to_the_head(fakes):
    p = pipe()
    im = Pattern(0)()
    out = p.classify([im], ["koala", "fire truck", "frog"], top_k=3, templates=["a photo of a {}."])
    assert len(out[0]["labels"]) == 3
    keys = [k for k in p.zeroshot.heads if k[0] == ("koala", "fire truck", "frog")]
    assert [k[1] for k in keys] == [("a photo of a {}.",)]
    # one template: the head is the (normalised) embedding of the filled prompt, per class
    W = p.zeroshot.heads[keys[0]]
    E = fakes["fake-text"].encode(["a photo of a koala.", "a photo of a fire truck.", "a photo of a frog."])
    np.testing.assert_allclose(W, E / np.linalg.norm(E, axis=1, keepdims=True), atol=1e-6)
    p.classify([im], ["koala", "fire truck", "frog"], top_k=1)  # the default prompts: a second head
    assert len([k for k in p.zeroshot.heads if k[0] == ("koala", "fire truck", "frog")]) == 2
    for bad in ([], ["no placeholder"], [3]):
        with pytest.raises(CaptionerError, match="templates must be"):
            p.classify([im], ["koala", "frog"], templates=bad)


def test_serving_rotation_matches_the_map(fakes):
    p = pipe()
    X = np.random.default_rng(1).random((3, 15)).astype(np.float32)
    for kind in ("paired", "pairfree", "ridge", "random"):
        m = p.rotation(kind)
        np.testing.assert_allclose(p.serving_rotation(kind).transform(X), m.transform(X), rtol=1e-5, atol=1e-6)
        assert p.serving_rotation(kind) is p.serving_rotation(kind)
    with pytest.raises(CaptionerError, match="15-dimensional"):  # the map's own message on a bad width
        from captioner.retrieval import to_text_space

        to_text_space(p.serving_rotation("paired"), np.zeros((1, 7), np.float32), 16)
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(CaptionerError, match="NaN"):
        to_text_space(p.serving_rotation("paired"), Xn, 16)


def _decoder_key_inputs():
    rng = np.random.default_rng(0)
    texts = ["a koala.", "a red fire truck.", "a green frog."]
    return {"name": "minilm-l6", "modality": "text", "dim": 4, "pooling": "mean", "weights_hash": "abc"}, texts, \
        rng.standard_normal((3, 4)).astype(np.float32)


def test_decoder_cache_key_is_stable_and_tracks_what_changes_the_weights():
    from captioner.pipeline_decoder import decoder_cache_key

    fp, texts, E = _decoder_key_inputs()
    a = decoder_cache_key(fp, "tiny", {"steps": 20, "lr": 1e-3}, texts, E, vocab_priority=2)
    # the same setup rebuilt: other dict orders, copies of the arrays and lists
    fp2 = dict(reversed(list(fp.items())))
    b = decoder_cache_key(fp2, "tiny", {"lr": 1e-3, "steps": 20}, list(texts), E.copy(), vocab_priority=2)
    assert a == b and len(a) == 10
    assert decoder_cache_key(fp, "tiny", {"steps": 20, "lr": 1e-3, "save_every": 7}, texts, E, 2) == a
    others = [decoder_cache_key(fp, "small", {"steps": 20, "lr": 1e-3}, texts, E, 2),  # another preset
              decoder_cache_key(fp, "tiny", {"steps": 21, "lr": 1e-3}, texts, E, 2),
              decoder_cache_key({**fp, "weights_hash": "abd"}, "tiny", {"steps": 20, "lr": 1e-3}, texts, E, 2),
              decoder_cache_key(fp, "tiny", {"steps": 20, "lr": 1e-3}, texts[::-1], E[::-1], 2),
              decoder_cache_key(fp, "tiny", {"steps": 20, "lr": 1e-3}, texts, E + 1e-3, 2),
              decoder_cache_key(fp, "tiny", {"steps": 20, "lr": 1e-3}, texts, E, 3)]
    assert len({a, *others}) == len(others) + 1


def test_decoder_cache_key_is_the_same_in_another_process(tmp_path):
    """Nothing process-dependent (hash seeds, home folder, time) goes into the key."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from captioner.pipeline_decoder import decoder_cache_key

    fp, texts, E = _decoder_key_inputs()
    here = decoder_cache_key(fp, "tiny", {"steps": 20}, texts, E, 2)
    code = ("import json, sys, numpy as np; from captioner.pipeline_decoder import decoder_cache_key; "
            "fp, texts, E = json.loads(sys.argv[1]); "
            "print(decoder_cache_key(fp, 'tiny', {'steps': 20}, texts, np.asarray(E, np.float32), 2))")
    env = {**os.environ, "PYTHONHASHSEED": "123", "CAPTIONER_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code, json.dumps([fp, texts, E.tolist()])], env=env,
                         cwd=Path(__file__).parents[1], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == here


@pytest.mark.slow
def test_decoder_checkpoint_is_reused_by_a_new_pipeline(fakes, captioner_home):
    pipe(decoder_overrides={"steps": 3}).decoder()
    first = sorted((captioner_home / "checkpoints").glob("decoder-*.pt"))
    assert len(first) == 1
    mtime = first[0].stat().st_mtime_ns
    pipe(decoder_overrides={"steps": 3}).decoder()  # a fresh instance: same key, loads the file
    assert sorted((captioner_home / "checkpoints").glob("decoder-*.pt")) == first
    assert first[0].stat().st_mtime_ns == mtime
    pipe(decoder_overrides={"steps": 4}).decoder()
    assert len(list((captioner_home / "checkpoints").glob("decoder-*.pt"))) == 2


class HeadImageEncoder(FakeImageEncoder):
    """The fake image encoder with a 3-class linear head over its 15 features (red, green, blue means)."""

    name = "fake-image-head"

    def classifier_head(self):
        W = np.zeros((3, 15), np.float32)
        W[0, 0] = W[1, 1] = W[2, 2] = 10.0
        return W, np.zeros(3, np.float32), ["red thing", "green thing", "blue thing"]


def test_head_rotation_needs_a_classifier_head(fakes, captioner_home):
    p = pipe()
    assert "head" not in p.eval_rotations
    with pytest.raises(CaptionerError, match="no classifier head"):
        p.rotation("head")
    fakes["fake-image-head"] = HeadImageEncoder()
    q = Pipeline("fake-image-head", "fake-text", progress=False, train_set=train_set(), decoder_preset="tiny",
                 decoder_corpus="bank", exclude=["a unicorn."])
    assert q.rotations == ["paired", "pairfree", "head"] and "head" in q.eval_rotations
    m = q.rotation("head")
    assert m.method == "head" and m.meta["pairing"].startswith("none (pseudo-pairs")
    assert m.meta["fit"]["head"]["classes"] == 3
    # centred where the bank is, not where the class-name prompts are
    np.testing.assert_allclose(m.mean_y, q.bank().E.mean(0), atol=1e-6)
    assert (captioner_home / "rotations").glob("head-*.safetensors")
    out = q.caption([Pattern(2)()], top_k=2, rotation="head", decode=False)
    assert out[0]["caption"] in CAPTIONS


def test_decoder_input_per_rotation_and_the_prompt_template_dropped(fakes):
    from captioner.pipeline_decoder import AUTO_DECODE_INPUT, drop_prompt_template

    auto = Pipeline("fake-img", "fake-txt", progress=False, train_set=train_set())
    assert auto.decode_input == "auto" and AUTO_DECODE_INPUT == {"head": "rotation"}
    assert [auto.decode_input_for(r) for r in ("head", "paired", "pairfree", "random", None)] == [
        "rotation", "projection", "projection", "projection", "projection"]
    fixed = Pipeline("fake-img", "fake-txt", progress=False, train_set=train_set(), decode_input="projection")
    assert fixed.decode_input_for("head") == "projection"
    with pytest.raises(CaptionerError, match="'auto', 'projection' or 'rotation'"):
        Pipeline("fake-img", "fake-txt", progress=False, train_set=train_set(), decode_input="direct")
    # the class-name prompt's template goes; anything else stays as decoded
    assert drop_prompt_template("a photo of a lorikeet.") == "a lorikeet."
    assert drop_prompt_template("A photo of an apple.") == "an apple."
    assert drop_prompt_template("a photo of the moon.") == "the moon."
    assert drop_prompt_template("a photo of an coffeemaker.") == "a coffeemaker."   # the article follows the noun
    assert drop_prompt_template("A photo of an European polecat.") == "a European polecat."
    assert drop_prompt_template("a photo of a Egyptian cat.") == "an Egyptian cat."
    for same in ("a bird.", "a photograph of a cat.", "this is a photo of a cat.", "a photo of.", ""):
        assert drop_prompt_template(same) == same
