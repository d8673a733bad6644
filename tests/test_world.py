"""The JEPA world as a product: its dataset, encoders, training command, chain and bad input."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from captioner.errors import CaptionerError


def test_world_dataset_splits_are_disjoint_seeded_and_clean():
    from captioner.datasets import get_dataset
    from captioner.world import scenes as W
    from captioner.world.data import scene_of

    sets = {sp: get_dataset("world", sp) for sp in ("train", "val", "test")}
    scenes = {sp: {s.label for s in d.samples} for sp, d in sets.items()}
    assert {sp: len(v) for sp, v in scenes.items()} == {"train": 194, "val": 32, "test": 98}
    assert not (scenes["train"] & scenes["test"]) and not (scenes["train"] & scenes["val"])
    assert len(sets["test"]) == 98 * 4 and all(len(s.captions) == 5 for s in sets["test"].samples)
    assert get_dataset("world", "test").key() == sets["test"].key() != get_dataset("world", "test", seed=1).key()
    s = sets["test"].samples[0]
    assert scene_of(s.id) == s.label
    sc = next(x for x in W.all_scenes() if x.key() == s.label)
    # a clean caption names the scene's true colour (one of its two words)
    assert all(any(w in c.lower() for w in W.COLOURS[sc.colour][1]) for c in s.captions)
    assert s.source().size == (32, 32)


def test_a_world_config_with_an_empty_attribute_is_refused(monkeypatch):
    from captioner.world import data
    from captioner.world import scenes as W

    monkeypatch.setattr(W, "ATTRS", {**W.ATTRS, "size": []})
    with pytest.raises(CaptionerError, match="attribute 'size' has no values"):
        data.scene_splits(0)
    with pytest.raises(CaptionerError, match="no attributes"):
        data.check_attributes({})


def test_world_encoders_name_the_training_command_when_absent(captioner_home):
    from captioner.encoders import get_encoder

    with pytest.raises(CaptionerError, match=r"captioner world train --preset lab --seed 0"):
        get_encoder("world-text-jepa", cache=False)
    with pytest.raises(CaptionerError, match=r"captioner world train --preset quick --seed 2"):
        get_encoder("world-ntp-last?preset=quick&seed=2", cache=False)


def test_prior_weights_and_prompts_known_answers():
    from eval.world.setting import PRIOR, prior_weights, prompts

    # value ranks in ATTRS order: red/small/left/top/white is rank 0 everywhere -> weight 1
    assert prior_weights(["small-red-top-left-white", "small-orange-top-left-white",
                          "large-red-bottom-left-black"]) == pytest.approx(
        [1.0, PRIOR["colour"], PRIOR["size"] * PRIOR["row"] ** 2 * PRIOR["background"] ** 2])
    p = prompts()
    assert [v for v, _ in p["col"]] == ["left", "centre", "right"] and "a disc on the left" in p["col"][0][1]
    assert "a crimson dot" in p["colour"][0][1]


def test_held_out_residual_known_answers():
    from eval.world.chain import held_out_residual

    rng = np.random.default_rng(0)
    Y = rng.standard_normal((500, 6))
    assert held_out_residual(3 * Y + 1, Y) == pytest.approx(0.0, abs=1e-12)    # a scale and a shift apart
    assert held_out_residual(-Y, Y) == pytest.approx(1.0)                        # anti-aligned: unrelated
    assert held_out_residual(rng.standard_normal((500, 6)), Y) > 0.98


@pytest.mark.slow
def test_device_script_smoke_runs_the_whole_chain_and_refuses_bad_input(tmp_path, monkeypatch):
    """The quick world trained from nothing, its encoders from the registry, the table with known
    structure; then a folder of another seed or world, a rotation of other encoders and a decoder of another
    text encoder are refused in one line."""
    import importlib.util
    from pathlib import Path

    from alignment.errors import MismatchError
    from alignment.procrustes import fit_procrustes, load_map
    from captioner.encoders import get_encoder
    from captioner.world.models import world_dir

    monkeypatch.setenv("CAPTIONER_HOME", str(tmp_path / "home"))
    spec = importlib.util.spec_from_file_location("device_world", Path(__file__).parent.parent / "scripts"
                                                  / "device_world.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "_cuda", lambda: False)
    summary = mod.main(["--smoke", "--home", str(tmp_path / "home")])
    assert summary["seeds"] == [0] and summary["preset"] == "quick"
    res = json.loads((tmp_path / "home" / "world" / "report-quick" / "results.json").read_text())
    assert [(e["text"], e["rotation"]) for e in res["table"]] == [
        (t, r) for t in ("text-jepa", "untrained") for r in ("paired", "pairfree-disjoint", "random")]
    for e in res["table"]:
        assert 0 <= e["residual"]["mean"] <= 1 and 0 <= e["r_at_1"]["mean"] <= 1 and e["cider_x100"]["mean"] >= 0
        assert e["matcher_accuracy"] is None and set(e["zeroshot"]) == {"colour", "size", "col", "row", "background"}
    assert len(res["targets"]["text_jepa_pairfree_vs_paired"]) == 1
    from eval.world.table import world_section

    sec = world_section()                       # what `captioner report` appends
    assert sec.startswith("## The JEPA world") and "| text JEPA (good views) | paired Procrustes |" in sec

    # the demo's World tab: a held-out scene, its render, captions through both rotations, its description
    from captioner.world.demo import world_example

    ex = world_example(5, preset="quick")
    assert ex["image"].size == (160, 160) and ex["truth"] and ex["paired"] and ex["pairfree"]

    # the registry's encoders: the NTP read at its last token differs from its mean (same checkpoint)
    texts = ["A big red disc on the left.", "A small blue dot at the top."]
    mean = get_encoder("world-ntp?preset=quick", cache=False)
    last = get_encoder("world-ntp-last?preset=quick", cache=False)
    assert mean.fingerprint() != last.fingerprint() and not np.allclose(mean.encode(texts), last.encode(texts))
    assert get_encoder("world-image-jepa?preset=quick", cache=False).dim == 12

    # a world folder of another seed, or of another world config
    folder = world_dir("quick", 0)
    shutil.copytree(folder, world_dir("quick", 1))
    with pytest.raises(CaptionerError, match=r"preset 'quick', seed 0, not 'quick', seed 1.*--seed 1"):
        get_encoder("world-text-jepa?preset=quick&seed=1", cache=False)
    meta = json.loads((folder / "world.json").read_text())
    (folder / "world.json").write_text(json.dumps({**meta, "world": "0123456789ab"}))
    with pytest.raises(CaptionerError, match="another world config"):
        get_encoder("world-text-jepa?preset=quick", cache=False)
    (folder / "world.json").write_text(json.dumps(meta))

    # a rotation fitted on other encoders
    img, tj, un = (get_encoder(f"{n}?preset=quick", cache=False) for n in
                   ("world-image-jepa", "world-text-jepa", "world-untrained"))
    X = np.random.default_rng(0).standard_normal((40, 12))
    m = fit_procrustes(X, X, x_encoder=img.fingerprint(), y_encoder=tj.fingerprint())
    m.save(tmp_path / "r.safetensors")
    with pytest.raises(MismatchError):
        load_map(tmp_path / "r.safetensors", x_encoder=img.fingerprint(), y_encoder=un.fingerprint())

    # the decoder kept for the text JEPA's bank is refused for another text encoder
    from eval.world.chain import decoder_for

    dec = tmp_path / "home" / "world" / "report-quick" / "decoder-s0-text-jepa.pt"
    assert dec.is_file()
    with pytest.raises(CaptionerError, match="trained for text encoder"):
        decoder_for("world-untrained?preset=quick&seed=0", {"bank": ["a red disc."], "Y": np.ones((1, 12))}, dec)
