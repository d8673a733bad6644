"""The scene lab's world: deterministic renders and captions, observation noise, ground-truth features,
the held-out Procrustes residual."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from captioner.jepa import embed as E
from captioner.jepa import views as V
from captioner.world import recipe as R
from captioner.world import scenes as W
from eval.scenelab import lab as S
from eval.scenelab import measures as M
from eval.scenelab import optimum as O


def test_world_size_and_latent_dim():
    scenes = W.all_scenes()
    assert len(scenes) == 6 * 2 * 3 * 3 * 3 == 324 and len({s.key() for s in scenes}) == 324
    assert W.LATENT_DIM == 5 + 1 + 2 + 2 + 2
    Z = W.latent_features(scenes)
    assert Z.shape == (324, W.LATENT_DIM)
    np.testing.assert_allclose(Z.mean(0), 0, atol=1e-6)   # balanced design: centred exactly
    # whitened: unit variance in every direction over the (uniform) scenes, i.e. covariance = identity
    np.testing.assert_allclose(Z.T.astype(np.float64) @ Z / len(Z), np.eye(W.LATENT_DIM), atol=1e-5)
    # and each block is a function of its attribute only: two scenes that differ in colour alone differ
    # in the first 5 coordinates alone
    a, b = W.Scene("red", "large", "left", "top", "black"), W.Scene("blue", "large", "left", "top", "black")
    d = W.latent_features([a])[0] - W.latent_features([b])[0]
    assert np.abs(d[:5]).sum() > 0.1 and np.abs(d[5:]).max() < 1e-6


def test_renders_are_deterministic_given_a_seed():
    sc = W.Scene("blue", "large", "right", "bottom", "grey")
    a = np.asarray(W.render(sc, 32, seed=7))
    b = np.asarray(W.render(sc, 32, seed=7))
    c = np.asarray(W.render(sc, 32, seed=8))
    assert a.shape == (32, 32, 3) and a.dtype == np.uint8
    np.testing.assert_array_equal(a, b)
    assert np.abs(a.astype(int) - c).sum() > 0
    arr1 = W.image_corpus(5, size=16, seed=3, renders=2)
    arr2 = W.image_corpus(5, size=16, seed=3, renders=2)
    assert tuple(arr1.shape) == (5, 2, 3, 16, 16) and bool((arr1 == arr2).all())


def test_observed_scenes_are_what_each_render_shows():
    # a render draws its observation first: without jitter, render_array's seed for (i, r) draws a
    # picture of exactly that observation, and about CORRUPT of the attributes differ from the scene
    scenes = W.sample_scenes(60, seed=4)
    obs = W.observed_scenes(scenes, 2, seed=4)
    assert len(obs) == 60 and all(len(o) == 2 for o in obs)
    for i in range(60):
        for r in range(2):
            seed = (4 * 1000003 + i) * 31 + r                  # render_array's seed for scene i, render r
            drawn = np.asarray(W.render(scenes[i], 16, seed=seed, jitter=False))
            np.testing.assert_array_equal(drawn, np.asarray(W.render(obs[i][r], 16, corrupt=0.0, jitter=False)))
    changed = np.mean([getattr(o[r], a) != getattr(sc, a) for sc, o in zip(scenes, obs) for r in range(2) for a in W.ATTRS])
    assert 0.04 < changed < 0.2                                  # CORRUPT 0.15, a redraw may land on the same value
    assert W.observed_scenes(scenes, 2, seed=4, corrupt=0.0) == [[sc, sc] for sc in scenes]


def test_clean_render_shows_the_latent():
    sc = W.Scene("red", "large", "left", "top", "black")
    a = np.asarray(W.render(sc, 32, seed=0, corrupt=0.0, jitter=False)).astype(int)
    assert tuple(a[7, 7]) == (215, 35, 35)                     # disc centre at (0.22, 0.22) of the side
    assert tuple(a[28, 28]) == (30, 30, 30)                    # the black background far from it
    small = np.asarray(W.render(W.Scene("red", "small", "left", "top", "black"), 32, corrupt=0.0,
                                jitter=False)).astype(int)
    red = lambda x: ((x[..., 0] > 150) & (x[..., 1] < 90)).sum()  # noqa: E731
    # disc areas scale as radius^2: (0.24 / 0.13)^2 = 3.4
    assert red(a) / red(small) == pytest.approx((0.24 / 0.13) ** 2, rel=0.15)


def test_captions_name_the_attributes_and_corruption_rate():
    sc = W.Scene("green", "small", "centre", "middle", "white")
    clean = [W.describe(sc, seed=i, corrupt=0.0) for i in range(50)]
    assert all(any(w in c.lower() for w in ("green", "emerald")) for c in clean)
    assert all(any(w in c.lower() for w in ("white", "pale")) for c in clean)
    assert W.describe(sc, seed=3) == W.describe(sc, seed=3)
    caps = W.captions(sc, 6, seed=1)
    assert len(caps) == len(set(caps)) == 6
    # each attribute misreported w.p. CORRUPT, to a random value (which may be the true one)
    rng = np.random.default_rng(0)
    wrong = np.mean([W.observe(sc, rng).colour != "green" for _ in range(4000)])
    assert wrong == pytest.approx(W.CORRUPT * 5 / 6, abs=0.02)


def test_text_corpus_views():
    c = V.text_corpus(30, seed=0, n_captions=4)
    assert len(c) == 30 and all(len(v) == 4 for v in c.scenes)
    assert c.key() == V.text_corpus(30, seed=0, n_captions=4).key() != V.text_corpus(30, seed=1, n_captions=4).key()


def test_procrustes_residual_known_answers():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 12))
    Q = np.linalg.qr(rng.standard_normal((12, 12)))[0]
    assert M.procrustes_residual(X, 3.0 * X @ Q + 5.0) < 1e-10          # a rotation, scale and shift: 0
    assert M.procrustes_residual(X, rng.standard_normal((400, 12))) > 0.9  # unrelated: about 1 (held out)
    noisy = X @ Q + 0.5 * rng.standard_normal((400, 12))
    # residual of a rotation plus noise of variance 0.25 per dim: 0.25 / 1.25 = 0.2
    assert M.procrustes_residual(X, noisy) == pytest.approx(0.2, abs=0.04)


def test_format_table_has_every_row():
    res = {"k": 10, "n_test": 324, "chance_mutual_knn": 10 / 323, "seconds": 1.0,
           "rows": [{"side": "image JEPA", "views": "good", "vs": "latents", "mutual_knn": 0.5,
                     "procrustes_residual": 0.4},
                    {"side": "text JEPA", "views": "good", "vs": "image JEPA", "mutual_knn": 0.45,
                     "procrustes_residual": 0.3, "mutual_knn_latents": 0.6, "procrustes_residual_latents": 0.2}]}
    t = S.format_table(res)
    assert "| text JEPA | good | image JEPA | 0.450 | 0.300 | 0.600 | 0.200 |" in t
    assert "| image JEPA | good | latents | 0.500 | 0.400 | - | - |" in t
    assert "started from" not in t
    res["config"] = {"init_from": "/runs/lab", "objective": {"reg": "cov", "reg_weight": 0.1}}
    assert "Each model started from its checkpoint in /runs/lab (fine-tuned with reg cov)" in S.format_table(res)


class _Seen(Exception):
    """Raised by the fake ``train`` with the TrainConfig the scene lab built."""


@pytest.fixture
def train_config(monkeypatch, tmp_path):
    """``train_config(kind, cfg)``: the TrainConfig ``train_and_load`` hands to ``train`` (which never runs)."""
    from captioner.jepa import train as T

    def fake_train(tc, out, **kw):
        raise _Seen(tc)

    monkeypatch.setattr(T, "train", fake_train)
    calls = itertools.count()

    def get(kind, cfg):
        with pytest.raises(_Seen) as e:
            R.train_and_load(kind, cfg, None, tmp_path / f"{kind}-{next(calls)}", False, 5, 0)
        return e.value.args[0]

    return get


def test_text_lr_applies_to_the_text_sides_only(train_config):
    cfg = S.LabConfig(lr=4e-3, text_lr=1e-3)
    lrs = {kind: train_config(kind, cfg).lr for kind in ("image-jepa", "text-jepa", "ntp")}
    assert lrs == {"image-jepa": 4e-3, "text-jepa": 1e-3, "ntp": 1e-3}
    assert train_config("text-jepa", S.LabConfig(lr=2e-3)).lr == 2e-3      # text_lr None: the shared lr


def test_mutual_knn_ceiling_of_perfect_latents_is_below_one():
    Z = W.latent_features(W.all_scenes())
    c = M.mutual_knn_ceiling(Z, 10)
    # ties among the scenes one attribute away (whitened: the 2 size, 4 column/row/background and 5 colour
    # neighbours sit at three distances): a rotation of the latents plus 1% noise scores ~0.85
    assert 0.8 < c < 0.9
    rng = np.random.default_rng(0)
    Q = np.linalg.qr(rng.standard_normal((W.LATENT_DIM, W.LATENT_DIM)))[0]
    assert M.procrustes_residual(Z @ Q + 0.01 * rng.standard_normal(Z.shape), Z) < 1e-3   # the residual: ~0
    t = S.format_table({"k": 10, "n_test": 324, "chance_mutual_knn": 10 / 323, "mutual_knn_ceiling": c,
                        "seconds": 1.0, "rows": []})
    assert f"ceiling (the latents vs a rotation of them + 1% noise) = {c:.3f}" in t


def test_objective_reaches_both_jepas(train_config):
    cfg = S.LabConfig(objective={"reg": "vicreg", "reg_weight": 0.2, "pred_hidden": 0})
    for kind in ("image-jepa", "text-jepa"):
        o = train_config(kind, cfg).objective
        assert (o.reg, o.reg_weight, o.pred_hidden) == ("vicreg", 0.2, 0)
    o = train_config("text-jepa", S.LabConfig(objective={})).objective   # empty: the preset's objective
    assert (o.reg, o.pred_hidden) == ("sigreg", 128)
    o = train_config("image-jepa", S.LabConfig()).objective               # the lab's default: a linear predictor
    assert (o.reg, o.reg_weight, o.pred_hidden) == ("sigreg", 0.1, 0)


def test_text_objective_reaches_the_text_sides_only(train_config):
    cfg = S.LabConfig(objective={"reg_weight": 0.1, "pred_hidden": 0}, text_objective={"pred_hidden": 128})
    seen = {}
    for kind in ("image-jepa", "text-jepa", "ntp"):
        o = train_config(kind, cfg).objective
        seen[kind] = (o.reg_weight, o.pred_hidden)
    # the image side keeps the shared objective; the text sides merge the override over it
    assert seen == {"image-jepa": (0.1, 0), "text-jepa": (0.1, 128), "ntp": (0.1, 128)}
    o = train_config("image-jepa", S.LabConfig(objective={}, text_objective={"reg_weight": 0.2})).objective
    assert (o.reg_weight, o.pred_hidden) == (0.05, 128)                  # text override alone: image keeps the preset's


def test_architecture_overrides_reach_their_side(train_config):
    tc = train_config("image-jepa", S.LabConfig())
    assert tc.image.pool == "mean+coords" and tc.image.embed_dim == W.LATENT_DIM      # the lab's default
    tc = train_config("image-jepa", S.LabConfig(image={"pool": "mean", "embed_dim": 99}))
    assert tc.image.pool == "mean" and tc.image.embed_dim == W.LATENT_DIM             # embed_dim stays the lab's
    tc = train_config("text-jepa", S.LabConfig(text={"layers": 1}))
    assert tc.text.layers == 1 and tc.text.embed_dim == W.LATENT_DIM

    tc = train_config("ntp", S.LabConfig(init_from="/runs/old-lab"))
    assert tc.init_from == "/runs/old-lab/ntp"                                      # each model from its own
    assert train_config("text-jepa", S.LabConfig()).init_from is None


def test_init_from_its_own_folder_is_refused(tmp_path):
    from captioner.errors import CaptionerError

    with pytest.raises(CaptionerError, match="own folder"):
        R.train_and_load("text-jepa", S.LabConfig(init_from=str(tmp_path)), None, tmp_path / "text-jepa", False, 5, 0)


def test_linear_predictor():
    import torch

    from captioner.jepa.model import ImageConfig, ObjectiveConfig, build_model

    torch.manual_seed(0)
    m = build_model("image-jepa", image=ImageConfig(image_size=16, channels=[4, 8], embed_dim=6, proj_hidden=16),
                    obj=ObjectiveConfig(pred_hidden=0, sigreg_slices=8))
    assert isinstance(m.pred, torch.nn.Linear) and m.pred.weight.shape == (6, 6)
    x = torch.rand(8, 3, 16, 16)
    out = m((x,), (x.flip(0),))
    assert torch.isfinite(out["loss"])
    out["loss"].backward()
    assert m.pred.weight.grad is not None


@pytest.mark.slow
def test_lookup_optimum_of_vicreg_is_the_whitened_latents_up_to_a_rotation():
    # an unlimited encoder trained with the JEPA loss + VICReg lands on the theorem's answer; two random
    # starts (two "modalities" sharing the view kernel) agree up to a rotation. Measured: 0.013 / 0.014 (eval.scenelab_objective).
    import torch

    torch.set_num_threads(1)
    Z = W.latent_features(W.all_scenes())
    a, b = (O.lookup_optimum("vicreg", steps=2000, seed=s) for s in (0, 1))
    assert a.shape == (324, W.LATENT_DIM)
    assert M.procrustes_residual(a, Z) < 0.06 and M.procrustes_residual(b, Z) < 0.06
    assert M.procrustes_residual(a, b) < 0.1
    with pytest.raises(ValueError, match="reg must be"):
        O.lookup_optimum("infonce", steps=1)
    with pytest.raises(ValueError, match="init must be"):
        O.lookup_optimum("vicreg", steps=1, dim=8, init="latents")
    # started at the latents, VICReg keeps them
    c = O.lookup_optimum("vicreg", steps=300, init="latents")
    assert M.procrustes_residual(c, Z) < 0.06


def _fake_log(run, losses):
    run.mkdir(parents=True, exist_ok=True)
    rows = "".join(f"{i + 1},{v},{v},0.0,0.001,0.1\n" for i, v in enumerate(losses))
    (run / "log.csv").write_text("step,loss,pred,reg,lr,seconds\n" + rows)


def test_final_loss_is_the_mean_of_the_last_tenth(tmp_path):
    _fake_log(tmp_path / "r", [5.0] * 90 + [1.0] * 5 + [2.0] * 5)
    assert R.final_loss(tmp_path / "r") == pytest.approx(1.5)
    _fake_log(tmp_path / "short", [3.0, 4.0])
    assert R.final_loss(tmp_path / "short") == pytest.approx(4.0)          # at least the last step


def test_restarts_keep_the_lowest_final_loss_and_init_from_follows(tmp_path, monkeypatch):
    import json

    final = {0: 0.50, 1000: 0.42, 2000: 0.47}
    seen = []

    def fake(kind, cfg, data, out, progress, steps, seed, **over):
        seen.append((out.name, seed))
        _fake_log(out, [1.0] * 9 + [final[seed]])
        return f"model-{seed}", f"cfg-{seed}", {}

    monkeypatch.setattr(R, "train_and_load", fake)
    model, tc, _, losses, models = R._train_best("text-jepa", S.LabConfig(restarts=3), None,
                                                 tmp_path / "text-jepa", False, 10)
    assert seen == [("text-jepa", 0), ("text-jepa-r1", 1000), ("text-jepa-r2", 2000)]
    assert (model, tc) == ("model-1000", "cfg-1000") and models == ["model-0", "model-1000", "model-2000"]
    assert losses == [(0, 0.5), (1000, 0.42), (2000, 0.47)]
    with pytest.raises(Exception, match="restarts must be >= 1"):
        R._train_best("text-jepa", S.LabConfig(restarts=0), None, tmp_path / "x", False, 10)
    # a later --init-from of this lab starts from the kept restart; without restarts, from <lab>/<kind>
    (tmp_path / "scenelab.json").write_text(json.dumps({"restarts": {"text-jepa": losses, "image-jepa": [[0, 0.3]]}}))
    assert R.kept_run(tmp_path, "text-jepa") == tmp_path / "text-jepa-r1"
    assert R.kept_run(tmp_path, "image-jepa") == tmp_path / "image-jepa"
    assert R.kept_run(tmp_path, "ntp") == tmp_path / "ntp"
    assert R.kept_run(tmp_path / "other", "text-jepa") == tmp_path / "other" / "text-jepa"
    res = {"k": 10, "n_test": 2, "chance_mutual_knn": 0.1, "seconds": 1.0, "rows": [],
           "restarts": {"text-jepa": losses}}
    assert "text-jepa: 3 restarts, final training loss 0.5000 (seed 0), 0.4200 (seed 1000), 0.4700 (seed 2000); " \
           "kept seed 1000." in S.format_table(res)
    assert "per restart" not in S.format_table(res)
    res["restart_residuals"] = {"text-jepa": [0.2351, 0.2, 0.25]}
    assert "text-jepa: residual vs latents per restart (not used to choose) 0.235, 0.200, 0.250." in S.format_table(res)


def _two_observations(n: int, seed: int):
    rng = np.random.default_rng(seed)
    scenes = W.sample_scenes(n, seed=seed)
    return [W.observe(s, rng) for s in scenes], [W.observe(s, rng) for s in scenes]


def test_view_subspace_finds_the_single_attribute_directions_in_a_wider_embedding():
    # an embedding of 12 + 5 dims, mixed by a random matrix: the 12 whitened latents (view-kernel
    # eigenvalue (1 - CORRUPT)^2 = 0.7225) and 5 colour x size products (eigenvalue 0.7225^2 = 0.52)
    mix = np.random.default_rng(5).standard_normal((17, 17))

    def embed(obs):
        Z = W.latent_features(obs)
        return np.concatenate([Z, (Z[:, :5, None] * Z[:, None, 5:6]).reshape(len(Z), -1)], 1) @ mix

    a, b = _two_observations(4000, seed=1)
    mu, P, lam = M.view_subspace(embed(a), embed(b), W.LATENT_DIM)
    assert P.shape == (17, 12) and lam.shape == (17,) and np.all(np.diff(lam) <= 1e-12)
    assert np.all(np.abs(lam[:12] - (1 - W.CORRUPT) ** 2) < 0.05)
    assert np.all(np.abs(lam[12:] - (1 - W.CORRUPT) ** 4) < 0.07)
    test = W.all_scenes()
    X = (embed(test) - mu) @ P
    assert M.procrustes_residual(X, W.latent_features(test)) < 0.02
    # the product directions alone are not the latents
    rest = (embed(test) - mu) @ M.view_subspace(embed(a), embed(b))[1][:, 12:]
    assert M.procrustes_residual(rest, W.latent_features(test)[:, :5]) > 0.8


def test_view_subspace_rejects_bad_shapes():
    with pytest.raises(ValueError, match="one shape"):
        M.view_subspace(np.zeros((5, 3)), np.zeros((5, 4)))
    with pytest.raises(ValueError, match="k must be"):
        M.view_subspace(np.ones((5, 3)), np.ones((5, 3)), k=4)


@pytest.mark.slow
def test_run_lab_end_to_end_with_a_wider_embedding_and_its_diagnosis(tmp_path):
    """A few steps of every model: the result's shape, the view-subspace scoring of a 16-d embedding,
    reuse of the checkpoints, and eval.scenelab_diagnose on a 12-d lab."""
    from captioner.errors import CaptionerError
    from eval.scenelab import diagnose as D

    small = dict(n_train=48, n_test=40, image_steps=3, text_steps=3, batch_size=8)
    res = S.run_lab(S.LabConfig(embed_dim=16, restarts=2, **small), out=tmp_path / "wide", progress=False)
    assert [r["side"] for r in res["rows"]] == ["image JEPA (two renders)", "text JEPA (two paraphrases)",
                                                "next-token LM (one document)", "next-token LM, last token",
                                                "untrained text encoder"]
    assert res["view_k"] == 12 and {k: len(v) for k, v in res["view_eigenvalues"].items()} == {"image": 16, "text": 16}
    assert all(np.all(np.diff(v) <= 1e-9) for v in res["view_eigenvalues"].values())
    assert len(res["restart_residuals"]["image-jepa"]) == 2
    assert "most view-predictable of 16 directions" in S.format_table(res)
    with pytest.raises(CaptionerError, match="width 16"):
        D.run(tmp_path / "wide", views=2)

    res12 = S.run_lab(S.LabConfig(**small), out=tmp_path / "lab", progress=False)
    assert "view_eigenvalues" not in res12
    # the same lab again reuses its checkpoints (same figures); other training settings are refused
    assert S.run_lab(S.LabConfig(**small), out=tmp_path / "lab", progress=False)["rows"] == res12["rows"]
    with pytest.raises(CaptionerError, match=r"trained otherwise than asked \(lr: 0.004 \(checkpoint\) vs 0.001"):
        S.run_lab(S.LabConfig(lr=1e-3, **small), out=tmp_path / "lab", progress=False)
    d = D.run(tmp_path / "lab", views=2)
    # the diagnosis's "rotation" is the lab's own residual against the latents, on the same embeddings
    assert d["image"]["rotation"] == pytest.approx(res12["rows"][0]["procrustes_residual"], abs=1e-9)
    assert d["text"]["rotation"] == pytest.approx(res12["rows"][1]["procrustes_residual_latents"], abs=1e-9)
    assert d["text_vs_image"]["rotation"] == pytest.approx(res12["rows"][1]["procrustes_residual"], abs=1e-9)
    assert set(d["image"]["probe"]) == set(W.ATTRS) and all(0 <= v <= 1 for v in d["image"]["probe"].values())
    assert set(d["image"]["interactions"]) == {"non_additive", "after_pairs", "pairs_chance", "by_pair"}
    assert (tmp_path / "lab" / "diagnose.json").is_file() and "probe accuracy" in D.table(d)

    # the anchor: a supervised image encoder written as a lab folder that --init-from starts from
    import torch

    from eval.scenelab import anchor as A

    a = A.train_anchor(tmp_path / "lab", tmp_path / "anchor", steps=4, progress=False)
    assert 0 <= a["residual_vs_latents"] <= 1.5 and (tmp_path / "anchor" / "anchor.json").is_file()
    for kind in ("image-jepa", "text-jepa", "ntp"):
        assert (tmp_path / "anchor" / kind / "checkpoint.pt").is_file()
    from captioner.jepa.encoder import load_jepa_encoder

    m = load_jepa_encoder(tmp_path / "anchor" / "image-jepa" / "checkpoint.pt").model
    assert torch.allclose(m.pred.weight, 0.85 ** 2 * torch.eye(12))          # the theorem's linear predictor
    test_scenes, ims, _ = S.test_pairs(S.LabConfig(**small), 32)
    assert M.procrustes_residual(E.embed_images(m, ims), W.latent_features(test_scenes)) \
        == pytest.approx(a["residual_vs_latents"], abs=1e-9)                    # the checkpoint is the scored encoder
    res = S.run_lab(S.LabConfig(init_from=str(tmp_path / "anchor"), **{**small, "text_steps": 1}),
                    out=tmp_path / "from-anchor", progress=False)
    assert res["rows"][0]["side"] == "image JEPA (two renders)"
    with pytest.raises(CaptionerError, match="not a finished lab"):
        A.train_anchor(tmp_path / "anchor", tmp_path / "x", steps=1, progress=False)


def test_config_diff_names_training_settings_only():
    saved = {"lr": 0.004, "steps": 10, "threads": 1, "device": "cpu", "params": 123,
             "objective": {"reg": "sigreg", "reg_weight": 0.1}, "text": {"dims": (12, 24)}}
    asked = {"lr": 0.004, "steps": 10, "threads": 2, "device": "auto",
             "objective": {"reg": "sigreg", "reg_weight": 0.1}, "text": {"dims": [12, 24]}}
    from captioner.jepa.train import RUNTIME_FIELDS, config_diff

    assert config_diff(saved, asked, ignore=RUNTIME_FIELDS) == []   # runtime fields, bookkeeping, tuple vs list
    asked["objective"]["reg"], asked["steps"] = "cov", 20
    assert config_diff(saved, asked, ignore=RUNTIME_FIELDS) == ["objective.reg: 'sigreg' (checkpoint) vs 'cov' (asked)",
                                                                "steps: 10 (checkpoint) vs 20 (asked)"]


def test_diagnose_residuals_known_answers():
    from eval.scenelab import diagnose as D

    rng = np.random.default_rng(0)
    Z = rng.standard_normal((400, 6))
    A = rng.standard_normal((6, 6))                                       # a linear distortion, no noise
    assert D.linear_residual(Z @ A, Z) < 1e-8
    assert M.procrustes_residual(Z @ A, Z) > 0.1                          # which no rotation undoes
    W = D.whiten(Z @ A)
    assert np.allclose(W.T @ W / len(W), np.eye(6), atol=1e-8)
    assert D.linear_residual(rng.standard_normal((400, 6)), Z) > 0.9      # unrelated


def test_interaction_fractions_known_answers():
    from eval.scenelab import diagnose as D

    scenes = W.all_scenes()
    Z = W.latent_features(scenes)
    it = D.interaction_fractions(Z @ np.random.default_rng(1).standard_normal((12, 12)), scenes)
    assert it["non_additive"] < 1e-10 and it["after_pairs"] < 1e-10          # additive: any linear map of Z
    colour_x_bg = (Z[:, :5, None] * Z[:, None, 10:12]).reshape(len(Z), -1)   # a pure pairwise warp
    it = D.interaction_fractions(np.concatenate([Z, colour_x_bg], 1), scenes)
    assert it["non_additive"] > 0.3 and it["after_pairs"] < 1e-10
    # 53 pairwise columns over 311 residual degrees of freedom
    assert it["pairs_chance"] == pytest.approx(it["non_additive"] * 53 / 311, rel=1e-9)
    bp = it["by_pair"]                                                        # all of it in colour x background
    assert len(bp) == 10 and bp["colourxbackground"]["share"] == pytest.approx(it["non_additive"], rel=1e-9)
    assert max(v["share"] for k, v in bp.items() if k != "colourxbackground") < 0.2 * it["non_additive"]
    assert bp["colourxbackground"]["chance"] == pytest.approx(it["non_additive"] * 10 / 311, rel=1e-9)
    noise = np.random.default_rng(2).standard_normal((len(Z), 12))           # no structure: pairs take ~ chance
    it = D.interaction_fractions(noise, scenes)
    assert abs((it["non_additive"] - it["after_pairs"]) - it["pairs_chance"]) < 0.03
