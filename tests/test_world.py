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
    # one value: no dimension to learn or match; refused before any training
    with pytest.raises(CaptionerError, match=r"attribute 'size' has one value \('small'\).*at least two values"):
        data.check_attributes({**W.ATTRS, "size": ["small"]})


def test_a_caption_corpus_can_omit_attributes():
    """captions(omit=p): a share p of a scene's captions leaves out exactly one attribute (the others still read
    right); p = 0 gives the captions of before, so the world's trained corpora are unchanged; the lab's
    caption_omit reaches the text side's training corpus."""
    from dataclasses import replace

    from captioner.world import scenes as W
    from captioner.world.recipe import LabConfig, caption_corpus

    sc = W.all_scenes()[11]
    assert W.captions(sc, 6, seed=3) == W.captions(sc, 6, seed=3, omit=0.0)
    full = W.read_caption(W.describe(sc, corrupt=0.0))
    every = W.captions(sc, 6, seed=3, corrupt=0.0, omit=1.0)
    for c in every:
        read = W.read_caption(c)
        missing = [a for a, v in read.items() if v is None]
        assert len(missing) == 1 and all(read[a] == full[a] for a in read if a not in missing), c
    scenes = W.sample_scenes(400, seed=0)
    cfg = LabConfig(n_captions=5, seed=0)
    share = np.mean([any(v is None for v in W.read_caption(c).values())
                     for caps in caption_corpus(replace(cfg, caption_omit=0.2), scenes).scenes for c in caps])
    assert 0.15 < share < 0.25
    assert not any(any(v is None for v in W.read_caption(c).values())
                   for caps in caption_corpus(cfg, scenes).scenes for c in caps)
    with pytest.raises(ValueError, match="probability"):
        W.captions(sc, 2, omit=1.5)


def test_world_text_encoders_refuse_words_they_never_saw(captioner_home):
    """A caption with a word outside the world's vocabulary is refused in one line naming it (the world's text
    encoders would embed it from untrained token vectors); the world's own captions, omissions included, pass."""
    from click.testing import CliRunner

    from captioner.cli import cli
    from captioner.encoders import get_encoder
    from captioner.world import scenes as W

    assert W.unknown_words(["A magenta disc on the left.", "A tiny dot, crimson, at the top.", "magenta"]) == ["magenta"]
    sc = W.all_scenes()[7]
    ok = [W.describe(sc, seed=k, corrupt=0.0, omit=a) for k in range(20) for a in (None, *W.ATTRS)]
    assert W.unknown_words(ok) == []
    r = CliRunner().invoke(cli, ["world", "train", "--preset", "smoke", "--seed", "0", "--quiet"])
    assert r.exit_code == 0, r.output
    enc = get_encoder("world-text-jepa?preset=smoke&seed=0", cache=False)
    assert enc.encode(ok[:3]).shape == (3, 12)
    with pytest.raises(CaptionerError, match=r"never saw the word 'magenta' in training.*rephrase") as e:
        enc.encode(["A magenta disc on the left."])
    assert "\n" not in str(e.value)


def test_cards_that_cannot_be_estimated_are_refused_naming_the_fix():
    """Too few distinct scenes for the lattice's dimensions: one line that says to give more items or the cards."""
    from alignment.errors import AlignmentError
    from alignment.lattice_cards import estimate_cards

    rng = np.random.default_rng(0)
    Z = np.repeat(rng.standard_normal((8, 12)), 5, axis=0)       # 8 distinct points in 12 dimensions
    with pytest.raises(AlignmentError, match=r"8 distinct points in \d+ lattice dimensions, too few.*--cards") as e:
        estimate_cards(Z)
    assert "\n" not in str(e.value)


def test_world_encoders_name_the_training_command_when_absent(captioner_home):
    from captioner.encoders import get_encoder

    with pytest.raises(CaptionerError, match=r"captioner world train --preset lab --seed 0"):
        get_encoder("world-text-jepa", cache=False)
    with pytest.raises(CaptionerError, match=r"captioner world train --preset quick --seed 2"):
        get_encoder("world-ntp-last?preset=quick&seed=2", cache=False)


def test_world_training_keeps_the_text_jepa_restart_with_the_lowest_final_loss(captioner_home, monkeypatch):
    """text_restarts: the text JEPA trained from seed, seed + 1000, ...; world.json names the restart with
    the lowest final training loss and the registry loads that one; a checkpoint of another seed is refused."""
    from captioner.encoders import get_encoder
    from captioner.world import models as WM
    from captioner.world.recipe import final_loss
    from captioner.world.train import train_world

    monkeypatch.setitem(WM.PRESETS, "smoke", {**WM.PRESETS["smoke"], "text_restarts": 2})
    meta = train_world("smoke", seed=3, progress=False)
    folder = WM.world_dir("smoke", 3)
    losses = [final_loss(folder / r) for r in ("text-jepa", "text-jepa-r1")]
    kept = "text-jepa" if losses[0] <= losses[1] else "text-jepa-r1"
    assert meta["runs"] == {"image-jepa": "image-jepa", "text-jepa": kept, "ntp": "ntp"}
    assert [s for s, _ in meta["restarts"]["text-jepa"]] == [3, 1003]
    assert len(meta["restarts"]["image-jepa"]) == len(meta["restarts"]["ntp"]) == 1
    path, _ = WM.checkpoint_for("world-text-jepa", "smoke", 3)
    assert path == folder / kept / "checkpoint.pt" and meta["encoders"]["world-text-jepa"] == str(folder / kept)
    assert get_encoder("world-text-jepa?preset=smoke&seed=3", cache=False).dim == 12
    from click.testing import CliRunner

    from captioner.cli import cli

    r = CliRunner().invoke(cli, ["world", "train", "--preset", "smoke", "--seed", "3", "--quiet"])  # reuses all
    assert r.exit_code == 0, r.output
    assert (f"text JEPA: 2 runs (init seeds 3, 1003), final training loss {losses[0]:.4f}, {losses[1]:.4f}; "
            f"kept the lowest: {kept}") in r.output
    # a kept run trained from another world seed
    (folder / "world.json").write_text(json.dumps({**meta, "runs": {"text-jepa": "text-jepa-r9"}}))
    bad = folder / "text-jepa-r9"
    shutil.copytree(folder / "text-jepa", bad)
    import torch

    ck = torch.load(bad / "checkpoint.pt", weights_only=False)
    ck["config"]["seed"] = 5
    torch.save(ck, bad / "checkpoint.pt")
    with pytest.raises(CaptionerError, match="trained with seed 5, not 3"):
        WM.checkpoint_for("world-text-jepa", "smoke", 3)
    shutil.rmtree(bad)   # the kept run's folder gone: the command that trains it again
    with pytest.raises(CaptionerError, match=r"text-jepa-r9/checkpoint.pt is missing .*world train --preset smoke --seed 3"):
        WM.checkpoint_for("world-text-jepa", "smoke", 3)


def test_prior_weights_and_prompts_known_answers():
    from captioner.world.setting import PRIOR, prior_weights, prompts

    # value ranks in ATTRS order: red/small/left/top/white is rank 0 everywhere -> weight 1
    assert prior_weights(["small-red-top-left-white", "small-orange-top-left-white",
                          "large-red-bottom-left-black"]) == pytest.approx(
        [1.0, PRIOR["colour"], PRIOR["size"] * PRIOR["row"] ** 2 * PRIOR["background"] ** 2])
    p = prompts()
    assert [v for v, _ in p["col"]] == ["left", "centre", "right"] and "a disc on the left" in p["col"][0][1]
    assert "a crimson dot" in p["colour"][0][1]


def test_attribute_head_is_the_mean_of_the_bank_captions_that_name_each_value():
    from captioner.encoders.base import l2n
    from captioner.world.zeroshot import attribute_head, prompts

    rng = np.random.default_rng(0)
    bank = ["A small red disc on the left at the top on a white background.",
            "A big crimson dot on the right at the bottom on a black background.",
            "A small blue disc in the centre halfway up on a grey background."]
    E = l2n(rng.normal(size=(3, 6)).astype(np.float32))
    mu = E.mean(0)
    seen = []

    def encode(texts):   # prompts of the values no bank caption names; a fixed vector each
        seen.extend(texts)
        return np.tile(np.eye(6, dtype=np.float32)[5], (len(texts), 1))

    vals, H = attribute_head(encode, "colour", mu, (bank, E))
    assert vals == ["red", "orange", "yellow", "green", "blue", "purple"]
    # red: captions 0 and 1 ("red", "crimson"), each centred and normalised, averaged, normalised
    assert H[0] == pytest.approx(l2n(l2n(E[:2] - mu).mean(0)[None])[0], abs=1e-6)
    assert H[4] == pytest.approx(l2n((E[2] - mu)[None])[0], abs=1e-6)
    # orange is named by no bank caption: its prompts, and only the prompts of unnamed values, are embedded
    assert H[1] == pytest.approx(l2n((np.eye(6)[5] - mu)[None])[0], abs=1e-6)
    want = [p for v, ps in prompts()["colour"] if v in ("orange", "yellow", "green", "purple") for p in ps]
    assert seen == want
    # without a bank: every value from its prompts
    seen.clear()
    attribute_head(encode, "colour", mu)
    assert seen == [p for _, ps in prompts()["colour"] for p in ps]


def test_side_stats_and_compare_sides_known_answers():
    from captioner.world.setting import compare_sides, side_stats
    from eval.world.table import _sides_lines

    red, orange = "small-red-top-left-white", "small-orange-top-left-white"
    big = "large-red-bottom-left-black"
    a = side_stats([red, red, red, orange])        # scene frequencies 3/4, 1/4 -> 1 / (9/16 + 1/16)
    assert a["scenes"] == 2 and a["effective_scenes"] == pytest.approx(1.6)
    assert a["freq"]["colour"][:2] == [0.75, 0.25] and a["freq"]["size"] == [1.0, 0.0]
    b = side_stats([orange, orange, orange, big])
    c = compare_sides(a, b)
    # colour: (3/4, 1/4) vs (1/4, 3/4): TV 0.5, the most frequent colour differs; size: (1, 0) vs (3/4, 1/4)
    assert c["tv"]["colour"] == pytest.approx(0.5) and c["tv"]["size"] == pytest.approx(0.25)
    assert c["max_tv"] == pytest.approx(0.5)
    assert c["mode_agrees"]["colour"] is False and c["mode_agrees"]["size"] is True
    assert compare_sides(a, a)["max_tv"] == 0.0 and all(compare_sides(a, a)["mode_agrees"].values())
    line = _sides_lines({"0": {"images": a, "captions": b, **c}})[-1]
    assert line.startswith("- seed 0: effective scenes 1.6 (renders) / 1.6 (captions); largest frequency gap 0.50 "
                           "(total variation, colour); most frequent value differs for colour")
    assert _sides_lines(None) == []


def test_raking_reaches_the_prior_frequencies_on_the_full_grid():
    from captioner.world import scenes as W
    from captioner.world.setting import PRIOR, attribute_values
    from eval.experiments.world_disjoint import rake

    keys = [sc.key() for sc in W.all_scenes()]
    w = rake(keys, iters=20)
    vals = attribute_values(keys)
    for a, q in PRIOR.items():
        target = q ** np.arange(len(W.ATTRS[a]))
        assert np.bincount(vals[a], weights=w) == pytest.approx(target / target.sum(), abs=1e-9)


def test_the_random_floor_pools_every_random_rotation_of_every_seed():
    from eval.world.table import aggregate, format_table, targets

    zs = {a: 0.3 for a in ("colour", "size", "col", "row", "background")}

    def row(tk, rk, seed, cider, **kw):
        return {"seed": seed, "text": tk, "rotation": rk, "matcher_accuracy": None, "residual": 1.0, "r_at_1": 0.0,
                "cider_x100": cider, "zeroshot_mean": 0.3, "zeroshot": zs, **kw}

    rows = []
    for seed in (0, 1):
        rows += [row("ntp", "random", seed, 40.0 + 2 * r + seed, random_seed=r) for r in range(4)]
        rows.append(row("ntp", "pairfree-disjoint", seed, 52.0))
    rnd = [40.0 + 2 * r + seed for seed in (0, 1) for r in range(4)]   # 8 draws: mean 43.5
    f = targets(rows)["baselines_at_random_floor"]["pairfree-disjoint/ntp/cider_x100"]
    assert f["random_mean"] == pytest.approx(43.5) and f["random_std"] == pytest.approx(np.std(rnd, ddof=1))
    assert f["met"] is False                                            # 52 > 43.5 + 2 x 2.39
    e = next(e for e in aggregate(rows) if e["rotation"] == "random")
    assert e["cider_x100"]["n"] == 8 and e["seeds"] == [0, 0, 0, 0, 1, 1, 1, 1]
    res = {"preset": "quick", "seeds": [0, 1], "table": aggregate(rows), "targets": targets(rows)}
    assert "| next-token LM, mean-pooled | random rotation (8 draws) |" in format_table(res)
    # every pair-free rotation on disjoint scenes is checked against the same floor, each in its own line
    rows += [row("ntp", "lattice-disjoint", seed, 44.0) for seed in (0, 1)]
    t = targets(rows)["baselines_at_random_floor"]
    assert t["lattice-disjoint/ntp/cider_x100"]["met"] is True and t["pairfree-disjoint/ntp/cider_x100"]["met"] is False
    text = format_table({"preset": "quick", "seeds": [0, 1], "table": aggregate(rows), "targets": targets(rows)})
    assert ("- ntp/cider_x100 pair-free lattice (disjoint scenes) 44.000, 44.000 vs random 43.500 +- "
            f"{np.std(rnd, ddof=1):.3f} (target: not above random + 2 std) -> met; mean of the seeds 44.000 "
            "-> met") in text
    # one seed above the limit (43.5 + 2 x 2.449 = 48.4), the seeds' mean below it: missed per seed only
    rows = [r for r in rows if r["rotation"] != "lattice-disjoint"]
    rows += [row("ntp", "lattice-disjoint", 0, 49.0), row("ntp", "lattice-disjoint", 1, 40.0)]
    f = targets(rows)["baselines_at_random_floor"]["lattice-disjoint/ntp/cider_x100"]
    assert f["met"] is False and f["mean_met"] is True
    text = format_table({"preset": "quick", "seeds": [0, 1], "table": aggregate(rows), "targets": targets(rows)})
    assert "49.000, 40.000 vs random 43.500" in text and "-> MISSED; mean of the seeds 44.500 -> met" in text
    # results read back from JSON may hold the attributes in sorted order: the table keeps the world's order
    for r in rows:
        r["zeroshot"] = dict(sorted(r["zeroshot"].items()))
    rows += [row("text-jepa", "paired", seed, 140.0) for seed in (0, 1)]
    for r in rows[-2:]:
        r["zeroshot"] = dict(sorted(zs.items()))
    text = format_table({"preset": "quick", "seeds": [0, 1], "table": aggregate(rows), "targets": targets(rows)})
    assert "| rotation | colour | size | col | row | background |" in text


def test_targets_check_the_zero_shot_gap_with_and_without_prototypes():
    from eval.world.table import aggregate, format_table, targets

    def row(rk, zs, zp):
        return {"seed": 1, "text": "text-jepa", "rotation": rk, "matcher_accuracy": None, "residual": 0.1,
                "r_at_1": 0.9, "cider_x100": 100.0, "zeroshot_mean": float(np.mean(list(zs.values()))),
                "zeroshot": zs, "zeroshot_proto_mean": float(np.mean(list(zp.values()))), "zeroshot_proto": zp}

    ones = dict.fromkeys(("size", "col", "row", "background"), 1.0)
    rows = [row("paired", {"colour": 0.83, **ones}, {"colour": 0.95, **ones}),
            row("lattice-disjoint", {"colour": 0.80, **ones}, {"colour": 0.94, **ones})]
    j = targets(rows)["text_jepa_pairfree_vs_paired"][0]
    assert j["zeroshot_gap"]["colour"] == pytest.approx(-0.03) and j["met"] is False
    assert j["zeroshot_gap_proto"]["colour"] == pytest.approx(-0.01) and j["met_proto"] is True
    e = next(e for e in aggregate(rows) if e["rotation"] == "lattice-disjoint")
    assert e["zeroshot_proto"]["colour"]["mean"] == pytest.approx(0.94)
    text = format_table({"preset": "lab", "seeds": [1], "table": aggregate(rows), "targets": targets(rows)})
    assert "worst zero-shot gap colour -3.0 points (target >= -2) -> MISSED" in text
    assert "  with prototypes: worst zero-shot gap colour -1.0 points -> met" in text
    assert "| pair-free lattice (disjoint scenes) + prototypes | 0.940" in text


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
    from alignment.maps import load_map
    from alignment.procrustes import fit_procrustes
    from captioner.encoders import get_encoder
    from captioner.world.models import world_dir

    monkeypatch.setenv("CAPTIONER_HOME", str(tmp_path / "home"))
    spec = importlib.util.spec_from_file_location("device_world", Path(__file__).parent.parent / "scripts"
                                                  / "device_world.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "_cuda", lambda: False)
    from eval.world import chain

    monkeypatch.setattr(chain, "DECODER", chain.DECODER)   # --smoke shortens the decoder: not for later tests
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

    sec = world_section()                       # what `python -m eval report` appends
    assert sec.startswith("## The JEPA world") and "| text JEPA (good views) | paired Procrustes |" in sec

    # the demo's World tab: a held-out scene, its render, captions through both rotations, its description
    from captioner.world.demo import world_example, world_pipeline

    ex = world_example(5, preset="quick")
    assert ex["image"].size == (160, 160) and ex["truth"] and ex["paired"] and ex["pairfree"]
    bank = set(world_pipeline("quick", 0).bank().texts)      # decoded captions; the nearest train ones beside
    assert set(ex["nearest"]) == {"paired", "pairfree"} and set(ex["nearest"].values()) <= bank
    from captioner.world.demo import world_markdown

    md = world_markdown(ex)
    assert ex["pairfree"] in md and ex["truth"] in md and ex["nearest"]["paired"] in md

    pf = world_pipeline("quick", 0).rotation("pairfree")         # the report's disjoint draw, lattice matcher
    assert pf.method == "lattice" and pf.meta["pairfree"]["info"]["cards"] == [6, 2, 3, 3, 3]

    # the world through the product's commands: eval coco / eval zeroshot / caption / classify --world
    _world_through_the_cli(tmp_path)

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


def test_ideal_codes_are_whitened_and_the_ideal_world_aligns_on_same_scenes_only():
    """The ideal encoder of eval.experiments.world_ideal: one-hot attribute codes, centred and whitened over the
    uniform world (12 dimensions for the lab world); one rotation apart, the matcher recovers it from the same
    scenes (R@1 1.0 on the held-out scenes) and not from disjoint ones (chance is 1/130)."""
    from eval.experiments.world_ideal import WORLDS, ideal_codes, run

    scenes, E = ideal_codes((6, 2, 3, 3, 3))
    assert scenes.shape == (324, 5) and E.shape == (324, 12)
    np.testing.assert_allclose(E.T @ E / len(E), np.eye(12), atol=1e-8)
    values, ratios = WORLDS["lab (324 scenes), report prior"]
    same = run(values, ratios, "same", seed=0)
    disjoint = run(values, ratios, "disjoint", seed=0)
    assert same["r_at_1"] == 1.0 and same["test_scenes"] == 130
    assert disjoint["r_at_1"] < 0.05


def test_the_lattice_matcher_aligns_the_ideal_world_on_disjoint_scenes():
    """Where every point matcher stays at chance (the test above): renders and captions of disjoint scenes of
    the ideal lab world (milder prior, noise 0.05) are one rotation apart through their attribute lattice."""
    from eval.experiments.world_ideal import WORLDS, run

    values, ratios = WORLDS["lab (324 scenes), milder prior"]
    res = run(values, ratios, "disjoint", noise=0.05, seed=0, method="lattice")
    assert res["r_at_1"] == 1.0 and res["test_scenes"] == 130


def test_the_lattice_null_summary_known_answers():
    # eval.experiments.world_lattice_floor's summary: mean +- std per kind, z of each found row against the
    # random correspondences (sample std, ddof 1)
    from eval.experiments.world_lattice_floor import summary, table

    rows = [{"text": "ntp", "kind": "found", "cider_x100": 60.0, "zeroshot_mean": 0.4},
            {"text": "ntp", "kind": "found", "cider_x100": 50.0, "zeroshot_mean": 0.3}]
    rows += [{"text": "ntp", "kind": "random correspondence", "cider_x100": v, "zeroshot_mean": 0.3 + d}
             for v, d in ((48.0, 0.0), (52.0, 0.1))]
    rows += [{"text": "ntp", "kind": "random rotation", "cider_x100": 50.0, "zeroshot_mean": 0.3}] * 2
    (s,) = summary(rows)
    sd = np.std([48.0, 52.0], ddof=1)                      # 2.83
    assert s["cider_x100/found"] == pytest.approx([55.0, np.std([60.0, 50.0], ddof=1)])
    assert s["cider_x100/random correspondence"] == pytest.approx([50.0, sd])
    assert s["cider_x100/random rotation"] == pytest.approx([50.0, 0.0])
    assert s["cider_x100/z_found"] == pytest.approx([10.0 / sd, 0.0])
    assert s["zeroshot_mean/z_found"] == pytest.approx([0.05 / np.std([0.3, 0.4], ddof=1), -0.05 / np.std([0.3, 0.4], ddof=1)])
    assert "| ntp | cider_x100 | 55.0 +- 7.1 | 50.0 +- 2.8 | 50.0 +- 0.0 | +3.5, +0.0 |" in table([s])


def test_read_caption_round_trips_every_template_and_reads_whole_words():
    from dataclasses import asdict

    from captioner.world.scenes import TEMPLATES, all_scenes, describe, read_caption

    scenes = all_scenes()
    for i, s in enumerate(scenes[::7]):
        for k in range(3 * len(TEMPLATES)):
            assert read_caption(describe(s, seed=1000 * i + k, corrupt=0)) == asdict(s)
    # "coloured" holds "red"; the first phrase of an attribute wins; an absent attribute is None
    got = read_caption("One tiny disc coloured amber, to the left, big and green.")
    assert got == {"colour": "orange", "size": "small", "col": "left", "row": None, "background": None}


def test_named_right_counts_each_attribute_and_all_five():
    from types import SimpleNamespace

    from eval.experiments.world_decode_input import named_right

    samples = [SimpleNamespace(label="small-yellow-top-right-grey"), SimpleNamespace(label="large-red-bottom-left-black")]
    caps = ["A small yellow disc at the top on the right on a grey background.",
            "A huge red dot at the bottom on the right against a pale backdrop."]
    got = named_right(caps, SimpleNamespace(samples=samples))
    assert got == {"all": 0.5, "colour": 1.0, "size": 1.0, "col": 0.5, "row": 1.0, "background": 0.5}


def test_world_decode_refuses_an_unknown_input():
    from eval.world.chain import decode

    with pytest.raises(ValueError, match="'rotation' or 'projection'"):
        decode(None, np.zeros((1, 12), np.float32), {}, how="nearest")


def test_world_experiments_parse_seeds_and_name_missing_models_in_one_line(tmp_path, monkeypatch, capsys):
    import click

    from eval.cli import main
    from eval.experiments import SEEDS

    assert SEEDS.convert("0,1, 2", None, None) == [0, 1, 2]
    for bad in ("x", "", "-1"):
        with pytest.raises(click.BadParameter):
            SEEDS.convert(bad, None, None)
    monkeypatch.setenv("CAPTIONER_HOME", str(tmp_path / "home"))
    with pytest.raises(SystemExit) as e:
        main(["experiment", "world-decode-input", "--seeds", "0"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "captioner world train --preset lab --seed 0" in err


def _world_through_the_cli(tmp_path):
    """`eval zeroshot --dataset world` agrees with the report's own scoring of the same map (eval.world.chain);
    `eval coco --dataset world` scores decoded captions; `caption` / `classify --world` read a render."""
    from click.testing import CliRunner

    from captioner.bank import l2n
    from captioner.cli import cli
    from captioner.datasets import get_dataset
    from captioner.world.demo import world_pipeline
    from captioner.world.setting import setting
    from eval.world.chain import prototype_inputs, score_rotation, text_context

    run = CliRunner().invoke
    r = run(cli, ["eval", "zeroshot", "--dataset", "world", "--world-preset", "quick", "-m", "pairfree", "--json",
                  "-q"])
    assert r.exit_code == 0, r.output
    rows = {x["attribute"]: x for x in json.loads(r.output)}
    pipe = world_pipeline("quick", 0)
    st = setting(0)
    ctx = text_context(pipe.text_encoder, st)
    Xt = l2n(pipe.encode_images([s.source() for s in st.test.samples]))
    want = score_rotation(np.asarray(pipe.rotation("pairfree").transform(Xt), np.float32), ctx)["zeroshot"]
    assert set(rows) == set(want) and all(abs(rows[a]["top1"] - want[a]) < 1e-9 for a in want)
    assert rows["colour"]["n_classes"] == 6 and rows["colour"]["n_images"] == len(st.test)
    # with class prototypes from the unlabelled train renders: the report's scoring again
    r = run(cli, ["eval", "zeroshot", "--dataset", "world", "--world-preset", "quick", "-m", "pairfree", "--json",
                  "-q", "--prototypes"])
    assert r.exit_code == 0, r.output
    rows = {x["attribute"]: x for x in json.loads(r.output)}
    m = pipe.rotation("pairfree")
    X = l2n(pipe.encode_images([s.source() for s in st.train.samples]))
    want = score_rotation(np.asarray(m.transform(Xt), np.float32), ctx,
                          prototype_inputs(m, X, Xt, ctx["mu"]))["zeroshot_proto"]
    assert set(rows) == set(want) and all(abs(rows[a]["top1"] - want[a]) < 1e-9 for a in want)
    assert rows["colour"]["prototypes"]["pool"] == len(st.train)

    out = tmp_path / "coco"
    r = run(cli, ["eval", "coco", "--dataset", "world", "--world-preset", "quick", "-c", "decoder", "-r", "paired",
                  "--no-meteor", "--test-limit", "24", "--out", str(out), "-q", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output[r.output.index("{"):])
    assert res["metrics"]["n_images"] == 24 and res["metrics"]["CIDEr_x100"] >= 0
    preds = json.loads((out / "results.json").read_text())
    assert len(preds) == 24 and all(p["caption"] for p in preds)

    s = get_dataset("world", "test", seed=0).samples[5]
    s.source().save(tmp_path / "render.png")
    r = run(cli, ["caption", str(tmp_path / "render.png"), "--world", "0", "--world-preset", "quick", "-r",
                  "pairfree", "-k", "1", "--json", "-q"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["captioner"] == "decoder" and got["results"][0]["caption"] == world_pipeline("quick", 0).caption(
        [s.source()], top_k=1, rotation="pairfree")[0]["caption"]
    r = run(cli, ["classify", str(tmp_path / "render.png"), "--world", "0", "--world-preset", "quick",
                  "--label-set", "colour", "--json", "-q"])
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.output)["results"][0]["labels"]) == 5      # top 5 of the 6 colours
    # its probabilities: the scale minimises the val split's NLL over all five attributes
    from captioner.calibration import _nll
    from captioner.world.zeroshot import calibrated_scale, val_cosines

    scale = calibrated_scale(pipe, "paired")
    C, y = val_cosines(pipe, "paired")
    assert C.shape == (5 * len(get_dataset("world", "val", seed=0)), 6) and set(np.unique(y)) <= set(range(6))
    assert all(_nll(scale, C, y) <= _nll(s, C, y) + 1e-9 for s in (scale / 2, scale * 2, 100.0))


def test_world_options_are_refused_where_they_do_not_apply():
    """One-line usage errors, before any model is loaded (no world is trained here)."""
    from click.testing import CliRunner

    from captioner.cli import cli

    run = CliRunner().invoke
    r = run(cli, ["classify", "x.png", "--world", "0", "--labels", "red,blue"])
    assert r.exit_code == 2 and "--label-set colour|size|col|row|background" in r.output
    r = run(cli, ["caption", "x.png", "--world", "0", "-c", "classifier"])
    assert r.exit_code == 2 and "has none" in r.output
    r = run(cli, ["caption", "x.png", "--world", "0", "--bank", "default"])
    assert r.exit_code == 2 and "--bank does not go with --world" in r.output
    r = run(cli, ["eval", "coco", "--dataset", "world", "--coco-root", "/nowhere"])
    assert r.exit_code == 2 and "takes no dataset folder" in r.output
    r = run(cli, ["eval", "coco", "--split", "val"])
    assert r.exit_code == 2 and "--split goes with --dataset world" in r.output
    r = run(cli, ["embed", "-e", "minilm-l6", "-d", "tuxpaint", "--world-seed", "1"])
    assert r.exit_code == 2 and "--world-seed goes with --dataset world" in r.output
    with pytest.raises(CaptionerError, match="no attribute 'world:shape'; choose one of colour"):
        from captioner.world.zeroshot import check_attribute

        check_attribute("world:shape")


def test_embed_reads_the_world_split_of_the_seed_given(tmp_path):
    from click.testing import CliRunner

    from captioner.cache import load_embeddings
    from captioner.cli import cli
    from captioner.datasets import get_dataset

    out = tmp_path / "val-s1.safetensors"
    r = CliRunner().invoke(cli, ["embed", "-e", "minilm-l6", "-d", "world", "-s", "val", "--world-seed", "1",
                                 "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    es = load_embeddings(out)
    want = get_dataset("world", "val", seed=1)
    assert set(es.sample_ids) == {s.id for s in want.samples} and es.sample_ids[0].startswith("world-s1-")


def test_world_renders_writes_held_out_pngs_with_their_captions(tmp_path):
    from click.testing import CliRunner
    from PIL import Image

    from captioner.cli import cli
    from captioner.datasets import get_dataset

    r = CliRunner().invoke(cli, ["world", "renders", "--seed", "1", "--start", "40", "--n", "2", "--out",
                                 str(tmp_path)])
    assert r.exit_code == 0, r.output
    want = get_dataset("world", "test", seed=1).samples[40:42]
    lines = r.output.strip().splitlines()
    assert len(lines) == 2
    for line, s in zip(lines, want):
        path, rest = line.split(": ", 1)
        assert rest == f"{s.label} | {s.captions[0]}"
        im = Image.open(path)
        assert im.size == (32, 32) and np.array_equal(np.asarray(im.convert("RGB")), np.asarray(s.source()))
    r = CliRunner().invoke(cli, ["world", "renders", "--start", "9999"])   # main() prints it as one line
    assert isinstance(r.exception, CaptionerError) and "has 392 renders" in str(r.exception)


def test_train_scenes_feed_the_encoders_no_val_or_test_scene_and_every_attribute_value(monkeypatch):
    """LabConfig.scenes "train": the scenes handed to the encoders' training are drawn from the seed's train
    split of the world setting only (its val and test scenes unseen compositions), and show every value of
    every attribute; "all" draws over all scenes as before."""
    from captioner.datasets import get_dataset
    from captioner.world import recipe
    from captioner.world import scenes as W

    class Fed(Exception):
        pass

    fed = {}

    def capture(scenes, *a, **k):   # what train_models renders for the image JEPA (the corpus's scenes too)
        fed["keys"] = [sc.key() for sc in scenes]
        raise Fed

    monkeypatch.setattr(recipe, "render_array", capture)
    for seed in (0, 1, 2):
        cfg = recipe.LabConfig(n_train=600, seed=seed, scenes="train")
        with pytest.raises(Fed):
            recipe.train_models(cfg, None, progress=False)
        keys = set(fed["keys"])
        held = {s.label for sp in ("val", "test") for s in get_dataset("world", sp, seed=seed).samples}
        train = {s.label for s in get_dataset("world", "train", seed=seed).samples}
        assert len(fed["keys"]) == 600 and keys <= train and not keys & held and len(held) == 130
        index = {sc.key(): sc for sc in W.all_scenes()}
        for a, values in W.ATTRS.items():
            assert {getattr(index[k], a) for k in keys} == set(values), (seed, a)
        # the setting the report scores on: its test scenes are not among them either
        from captioner.world.setting import setting

        assert not keys & {s.label for s in setting(seed).test.samples}
    assert recipe.training_scenes(recipe.LabConfig(n_train=50)) == W.sample_scenes(50, seed=0)
    with pytest.raises(CaptionerError, match="unknown training scenes 'val'"):
        recipe.training_scenes(recipe.LabConfig(scenes="val"))


def test_train_scenes_encoders_have_their_own_folder_names_and_command(captioner_home):
    from captioner.encoders import get_encoder
    from captioner.world import models as WM
    from captioner.world.data import fingerprint
    from captioner.world.train import lab_config
    from eval.world.chain import world_name

    assert WM.world_dir("quick", 1) != WM.world_dir("quick", 1, "train")
    assert WM.world_dir("quick", 1, "train").name == "quick-s1-train" and WM.world_dir("quick", 1).name == "quick-s1"
    assert world_name("world-text-jepa", "lab", 2) == "world-text-jepa?preset=lab&seed=2"
    assert world_name("world-text-jepa", "lab", 2, "train") == "world-text-jepa?preset=lab&seed=2&scenes=train"
    assert world_name("minilm-l6", "lab", 2, "train") == "minilm-l6"
    assert lab_config("quick", 1).scenes == "all" and lab_config("quick", 1, "train").scenes == "train"
    with pytest.raises(CaptionerError, match=r"captioner world train --preset quick --seed 2 --scenes train`"):
        get_encoder("world-text-jepa?preset=quick&seed=2&scenes=train", cache=False)
    with pytest.raises(CaptionerError, match="unknown world training scenes 'some'"):
        WM.world_dir("quick", 0, "some")
    # a folder whose world.json says all scenes (or none: before the option) is not the train scenes' one
    folder = WM.world_dir("quick", 0, "train")
    folder.mkdir(parents=True)
    (folder / WM.META).write_text(json.dumps({"preset": "quick", "seed": 0, "world": fingerprint()}))
    with pytest.raises(CaptionerError, match=r"trained on all scenes, not train; .*--seed 0 --scenes train"):
        WM.read_meta(folder, "quick", 0, "train")
    (folder / WM.META).write_text(json.dumps({"preset": "quick", "seed": 0, "world": fingerprint(),
                                              "scenes": "train"}))
    assert WM.read_meta(folder, "quick", 0, "train")["scenes"] == "train"
    with pytest.raises(CaptionerError, match=r"trained on train scenes, not all"):
        WM.read_meta(folder, "quick", 0)


def test_the_world_report_reads_the_train_scenes_encoders(tmp_path, monkeypatch, capsys):
    from eval.cli import main
    from eval.world.table import format_table

    monkeypatch.setenv("CAPTIONER_HOME", str(tmp_path / "home"))
    with pytest.raises(SystemExit) as e:
        main(["world", "report", "--preset", "quick", "--seeds", "1", "--scenes", "train", "--quiet"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert "captioner world train --preset quick --seed 1 --scenes train" in err
    assert (tmp_path / "home" / "world" / "report-quick-train").is_dir()
    res = {"preset": "quick", "scenes": "train", "seeds": [0], "table": [],
           "targets": {"text_jepa_pairfree_vs_paired": [], "baselines_at_random_floor": {}}}
    assert format_table(res).startswith("World preset `quick`, encoders trained on the train scenes only, seeds [0]")


def test_a_split_that_leaves_an_attribute_value_unseen_is_refused_in_one_line(monkeypatch):
    from captioner.world import data
    from captioner.world import scenes as W
    from captioner.world.recipe import LabConfig, training_scenes

    every = W.all_scenes()
    monkeypatch.setattr(data, "scene_splits", lambda seed=0: {
        "train": [sc for sc in every if sc.size != "large"], "val": [], "test": [sc for sc in every
                                                                               if sc.size == "large"]})
    with pytest.raises(CaptionerError) as e:
        training_scenes(LabConfig(n_train=100, scenes="train"))
    msg = str(e.value)
    assert "\n" not in msg and "never show size large" in msg and "--scenes all" in msg
    monkeypatch.undo()
    # too few draws from a full split: the same one line, naming the draw's fix
    with pytest.raises(CaptionerError, match=r"the 3 training scenes drawn for seed 0 never show colour .*n_train"):
        training_scenes(LabConfig(n_train=3, scenes="train"))


def test_world_train_on_the_train_scenes_keeps_its_own_folder_and_encoders(captioner_home):
    """`captioner world train --preset smoke --scenes train` (4 steps a model): world.json and the lab config
    say "train", the registry loads the encoders with &scenes=train, and no all-scenes folder is made."""
    from click.testing import CliRunner

    from captioner.cli import cli
    from captioner.encoders import get_encoder
    from captioner.world import models as WM

    r = CliRunner().invoke(cli, ["world", "train", "--preset", "smoke", "--seed", "4", "--scenes", "train", "--json",
                                 "--quiet"])
    assert r.exit_code == 0, r.output
    meta = json.loads(r.output)
    folder = WM.world_dir("smoke", 4, "train")
    assert meta["scenes"] == "train" and meta["config"]["scenes"] == "train" and (folder / WM.META).is_file()
    assert not WM.world_dir("smoke", 4).exists()
    enc = get_encoder("world-text-jepa?preset=smoke&seed=4&scenes=train", cache=False)
    assert enc.dim == 12 and enc.name.endswith("&scenes=train")
    with pytest.raises(CaptionerError, match=r"--preset smoke --seed 4`"):
        get_encoder("world-text-jepa?preset=smoke&seed=4", cache=False)


def test_world_prior_caption_side_perturbs_the_prior_and_omits_at_the_rates_asked():
    """The world-prior experiment's caption side: clean captions of the disjoint setting's caption scenes only,
    a share ``omit`` of them leaving out exactly one attribute (size, at rate 0.3, more often than colour at
    0.1), each naming its own scene's values where it names one; a perturbed prior moves the value frequencies."""
    from captioner.world import scenes as W
    from captioner.world.setting import setting
    from eval.experiments.world_prior import caption_side, parse_grid

    st = setting(0)
    texts, keys = caption_side(st, 0.3, 0.2, 0)
    assert len(texts) == len(keys) == 5000
    assert set(keys) <= {st.bank_scene[j] for j in st.uniform_captions}
    read = [W.read_caption(t) for t in texts]
    missing = [[a for a, v in r.items() if v is None] for r in read]
    assert max(len(m) for m in missing) == 1
    assert abs(np.mean([bool(m) for m in missing]) - 0.2) < 0.03
    counts = {a: sum(m == [a] for m in missing) for a in W.ATTRS}
    assert counts["size"] > 2 * counts["colour"] > 0
    index = {sc.key(): sc for sc in W.all_scenes()}
    assert all(v == getattr(index[k], a) for r, k in zip(read, keys) for a, v in r.items() if v is not None)
    assert W.unknown_words(texts) == []

    def freq(ks):
        v = np.array([W.ATTRS["colour"].index(index[k].colour) for k in ks])
        return np.bincount(v, minlength=6) / len(v)

    base, moved = freq(caption_side(st, 0.0, 0.0, 0)[1]), freq(keys)
    assert 0.02 < 0.5 * np.abs(base - moved).sum() < 0.3
    assert parse_grid("0:0,0.3:0.2") == [(0.0, 0.0), (0.3, 0.2)]
    import click

    with pytest.raises(click.BadParameter, match="p:omit pairs"):
        parse_grid("0.3")


def test_world_prior_trains_its_omission_text_jepa_once_and_embeds_with_it(captioner_home):
    """``--text-omit``: a text JEPA of the preset's recipe trained on captions that omit attributes, in the
    report folder, reused on the next call (not trained again), and usable as an encoder by its jepa: name."""
    from captioner.encoders import get_encoder
    from eval.experiments.world_prior import omit_text_encoder

    name = omit_text_encoder("smoke", 0, "all", 0.5, progress=False)
    assert name.startswith("jepa:") and "text-jepa-omit50-s0" in name
    ckpt = captioner_home / "world" / "report-smoke" / "text-jepa-omit50-s0" / "text-jepa" / "checkpoint.pt"
    stamp = ckpt.stat().st_mtime_ns
    assert omit_text_encoder("smoke", 0, "all", 0.5, progress=False) == name
    assert ckpt.stat().st_mtime_ns == stamp                       # reused, not trained again
    Z = get_encoder(name, cache=False).encode(["A small red disc on the left.", "A disc on the left."])
    assert Z.shape == (2, 12) and np.isfinite(Z).all()


def test_world_prior_scores_the_omission_flags_against_the_captions_words():
    """omission_flags: the share of omitting captions the fit set aside (label -1) and of complete ones, with the
    fit's rows mapped back through its shuffle (extra["yi"])."""
    from types import SimpleNamespace

    from eval.experiments.world_prior import omission_flags

    complete = np.array([True, True, True, False, False])
    yi = np.array([4, 0, 3, 1, 2])                    # fit row j is caption yi[j]
    labels_y = np.array([[-1, -1], [0, 1], [2, 0], [1, 1], [-1, -1]])   # captions 4 and 2 set aside
    fitted = SimpleNamespace(extra={"yi": yi, "result": SimpleNamespace(info={"labels_y": labels_y})})
    assert omission_flags(fitted, complete) == {"omitting_flagged": 0.5, "complete_flagged": 1 / 3}


def test_the_world_report_trains_again_its_decoder_of_a_retrained_encoder_only(monkeypatch, tmp_path):
    """The report's cached decoder of an encoder whose weights changed (retrained) is trained again over the old
    one; one kept for another encoder is refused, never overwritten."""
    import eval.world.chain as chain
    from captioner.errors import CacheMismatchError

    calls, fp = [], {"name": "world-ntp", "dim": 64, "pooling": "mean", "weights_hash": "new"}

    def fake_train(bank, Y, enc, path, mcfg, tcfg, device="cpu", progress=True, force=False):
        calls.append(force)
        if not force:
            raise CacheMismatchError(f"{path}: checkpoint trained for text encoder ...")
        return "decoder"

    class Enc:
        def fingerprint(self):
            return fp

    stored = {"text_encoder": {**fp, "weights_hash": "old"}}
    monkeypatch.setattr("captioner.decoder_train.train_decoder", fake_train)
    monkeypatch.setattr("captioner.encoders.get_encoder", lambda name: Enc())
    monkeypatch.setattr("captioner.decoder.read_checkpoint", lambda path: stored)
    ctx = {"bank": ["a red dot."], "Y": np.zeros((1, 2))}
    assert chain.decoder_for("world-ntp", ctx, tmp_path / "d.pt") == "decoder" and calls == [False, True]
    stored["text_encoder"] = {**fp, "name": "world-text-jepa", "weights_hash": "old"}
    calls.clear()
    with pytest.raises(CacheMismatchError, match="trained for text encoder"):
        chain.decoder_for("world-ntp", ctx, tmp_path / "d.pt")
    assert calls == [False]


def test_additive_r2_in_the_whole_space_and_in_the_lattice_subspace_known_answers():
    from captioner.world import scenes as W
    from captioner.world.setting import attribute_values
    from eval.experiments.world_wide import additive_r2

    keys = [sc.key() for sc in W.all_scenes()]
    av = attribute_values(keys)
    rng = np.random.default_rng(0)
    # an additive lattice in the first 12 axes of 20: one random vector per value, each attribute centred
    lat = np.zeros((len(keys), 20))
    for a, v in av.items():
        E = rng.normal(size=(v.max() + 1, 12))
        lat[:, :12] += (E - E.mean(0))[v]
    inter = np.zeros((len(keys), 20))    # a colour x size interaction, centred in both, in axes 12-19 only
    cs = (av["colour"] - 2.5) * (av["size"] - 0.5)
    inter[:, 12:] = np.outer(cs, rng.normal(size=8))
    Z = lat + inter
    want = (lat ** 2).sum() / ((lat ** 2).sum() + (inter ** 2).sum())   # the two parts are orthogonal
    assert additive_r2(Z, keys) == pytest.approx(want, rel=1e-6)
    assert additive_r2(Z, keys, within=True) == pytest.approx(1.0, abs=1e-9)
    # the interaction inside the lattice's own axes: not a lattice even there
    Z2 = lat.copy()
    Z2[:, :8] += inter[:, 12:]
    assert additive_r2(Z2, keys, within=True) < 0.99
    assert additive_r2(lat, keys) == pytest.approx(1.0) and additive_r2(lat, keys, within=True) == pytest.approx(1.0)
    # the true subspace: the lattice's 12 axes exactly (sum of k - 1 over 6,3,3,3,2), the interaction's not in it
    from eval.experiments.world_wide import true_subspace

    V = true_subspace(Z, keys)
    assert V.shape == (12, 20) and np.allclose(V[:, 12:], 0, atol=1e-9) and np.allclose(V @ V.T, np.eye(12))


def test_world_wide_counts_the_sides_with_the_worlds_cards(monkeypatch):
    from eval.experiments import world_wide as WW

    def fake(preset, seed):   # seed 0: the view subspace right on both sides; seed 1: on the images only
        side = {"eigenvalues": [1.0], "lattice_dim": 32, "searched_dim": 16, "additive_r2": 0.4,
                "additive_r2_in_subspace": 0.9, "view_eigenvalues": [0.8], "view_k": 12, "scenes": 60,
                "corpus_scenes": 194}
        good, bad = [6, 3, 3, 3, 2], [5, 5, 5, 3, 3]
        return {"preset": preset, "seed": seed, "embed_dim": 32, "world_cards": good,
                "sides": {"images": {**side, "cards": bad, "view_cards": good, "corpus_cards": good},
                          "captions": {**side, "cards": good if seed else bad, "view_cards": bad if seed else good,
                                       "corpus_cards": bad if seed else good}}}

    monkeypatch.setattr(WW, "run", fake)
    res = WW.run_seeds("lab32", [0, 1])
    assert res["sides"] == 4 and res["cards_right"] == {"cards": 1, "view_cards": 3, "corpus_cards": 3,
                                                        "true_subspace_cards": 0, "corpus_true_subspace_cards": 0}
    text = WW.tables(res)
    assert text.endswith("cards right (4 sides, 2 seeds): from the cloud alone 1, in the view subspace 3, from the "
                         "training corpus in the view subspace 3; in the true subspace (diagnostic): the cloud 0, "
                         "the corpus 0")
    assert "| 6,3,3,3,2 (194 scenes; the cloud 60) |" in text
    # the view subspace's size: the largest ratio of a leading eigenvalue to the next
    from alignment.lattice_cards import view_dimension

    assert view_dimension(np.array([0.8, 0.78, 0.75, 0.4, 0.38])) == 3
    assert view_dimension(np.array([0.7])) == 1


def test_the_world_report_computes_seeds_in_worker_processes_with_the_same_rows(tmp_path, monkeypatch):
    """`world report --jobs 2`: each seed in a spawned worker (here reading its kept rows, written under the
    real key), the rows back in seed order and the same as one process gives; --jobs 0 is refused."""
    from captioner.world import models as WM
    from captioner.world.data import fingerprint
    from eval.world.table import default_jobs, rows_key, world_report

    monkeypatch.setenv("CAPTIONER_HOME", str(tmp_path / "home"))
    out = tmp_path / "rep"
    out.mkdir()
    for seed in (2, 0):
        folder = WM.world_dir("quick", seed, "train")
        folder.mkdir(parents=True)
        (folder / WM.META).write_text(json.dumps({"preset": "quick", "seed": seed, "world": fingerprint(),
                                                  "scenes": "train", "n": seed}))
        rows = [{"text": "text-jepa", "rotation": rot, "seed": seed, "cider_x100": 10.0 * seed + i}
                for i, rot in enumerate(("paired", "random"))]
        (out / f"seed-{seed}.json").write_text(json.dumps({"key": rows_key("quick", seed, scenes="train"),
                                                            "rows": rows}))
    got = {jobs: world_report("quick", (2, 0), out=out, progress=False, scenes="train", jobs=jobs)["rows"]
           for jobs in (1, 2)}
    assert got[1] == got[2]
    assert [(r["seed"], r["rotation"], r["cider_x100"]) for r in got[2]] == [
        (2, "paired", 20.0), (2, "random", 21.0), (0, "paired", 0.0), (0, "random", 1.0)]
    assert default_jobs("cuda", 3) == 1 and default_jobs("cpu", 1) == 1
    with pytest.raises(CaptionerError, match="--jobs must be 1 or more, not 0"):
        world_report("quick", (0,), out=out, progress=False, scenes="train", jobs=0)
