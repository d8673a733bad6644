"""The scene lab's experiment: train an image JEPA (two renders of one scene), a text JEPA (two paraphrases)
and the next-token baseline (a scene's captions as one document) on the world of ``captioner.world.scenes``,
and score each text side against the image JEPA (and all against the latents) on held-out pairs.
``captioner scenelab`` runs ``run_lab``."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from captioner.jepa.embed import _embed_uint8, embed_images, embed_texts
from captioner.world.scenes import (
    LATENT_DIM,
    captions,
    held_out_pairs,
    latent_features,
    render_array,
    sample_scenes,
)
from eval.scenelab.measures import mutual_knn, mutual_knn_ceiling, procrustes_residual, view_subspace


@dataclass
class LabConfig:
    preset: str = "tiny"
    # training scenes (each with n_renders renders and n_captions captions): with 3000 the JEPAs learn the
    # training set's instances as well as their attributes, a warp that held-out scenes show as residual
    # (README, scene lab: started at the answer); 12000 took image vs latents from 0.10 to 0.02-0.03
    n_train: int = 12000
    n_test: int = 324
    n_captions: int = 6
    n_renders: int = 4
    # the defaults are the best of a sweep (README, scene lab): the image JEPA kept losing colour at 1200
    # steps and the text JEPA with an MLP predictor stayed further from the latents than a linear one;
    # 2400 / 1600 steps lost colour on two seeds of three, 4800 / 3200 on one side of one
    image_steps: int = 4800
    text_steps: int = 3200
    batch_size: int = 64
    lr: float = 4e-3               # the image JEPA's (and the text side's when text_lr is None)
    text_lr: float | None = None   # the text JEPA's and the NTP baseline's learning rate (None: lr)
    embed_dim: int = LATENT_DIM    # both JEPAs: the dimension of the view kernel's leading eigenspace
    k: int = 10
    seed: int = 0
    # objective overrides for both JEPAs (ObjectiveConfig fields: reg, reg_weight, target, ...) over the
    # preset's (SIGReg); empty: the preset's as they are
    objective: dict = field(default_factory=lambda: {"reg_weight": 0.1, "pred_hidden": 0})
    # per-side override for the text JEPA and the NTP baseline, merged over ``objective`` (empty: the
    # same objective as the image JEPA); e.g. {"pred_hidden": 128} keeps an MLP predictor on the text side
    # while the image side uses a linear one
    text_objective: dict = field(default_factory=dict)
    # architecture overrides over the preset's (ImageConfig / TextConfig fields). The image default pools
    # the global average (what) and each channel's soft-argmax (where): the tiny preset's "flatten" and
    # then the average beside the flattened map left the image JEPA further from the latents (README,
    # scene lab)
    image: dict = field(default_factory=lambda: {"pool": "mean+coords"})
    text: dict = field(default_factory=dict)
    # a previous lab folder: each model starts from <init_from>/<kind>/checkpoint.pt (train's init_from)
    init_from: str | None = None
    # train each JEPA this many times (init seeds seed, seed + 1000, ...; the same data) and keep the run
    # with the lowest final training loss: a label-free choice (README, scene lab: seeds)
    restarts: int = 1
    # the text JEPA's own restart count (None: ``restarts``); the world's lab preset trains its text JEPA 3
    # times (docs/results/world.md: one run in three left seed 1 less additive than the others)
    text_restarts: int | None = None
    # score each JEPA on the ``view_k`` directions of its embedding that one view predicts best
    # (``view_subspace``, fitted on two views of ``view_fit`` training scenes in the JEPA's own modality;
    # no cross-modal pair). None: LATENT_DIM when embed_dim is wider, else the raw embedding; 0: never.
    # The baselines (NTP, untrained) have no good views and are scored raw.
    view_k: int | None = None
    view_fit: int = 3000
    # the renders already carry the observation noise; augmentations here must not move, flip or
    # recolour the object (that would erase what the captions say)
    augment: dict = field(default_factory=lambda: {"crop_scale": [1.0, 1.0], "crop_ratio": [1.0, 1.0],
                                                   "flip": False, "brightness": 0.1, "contrast": 0.1,
                                                   "saturation": 0.0, "hue": False, "noise": 0.02})


def lab_config(lab_dir) -> LabConfig | None:
    """The LabConfig a finished lab in ``lab_dir`` ran with (its scenelab.json; fields that this release no
    longer has are dropped), or None when the folder has no scenelab.json."""
    import json
    from pathlib import Path

    p = Path(lab_dir) / "scenelab.json"
    if not p.is_file():
        return None
    conf = json.loads(p.read_text())["config"]
    return LabConfig(**{k: v for k, v in conf.items() if k in LabConfig.__dataclass_fields__})


def augment_config(cfg: LabConfig):
    """``cfg.augment`` (JSON-friendly lists) as the views' AugmentConfig (tuples)."""
    from captioner.jepa.views import AugmentConfig

    return AugmentConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in cfg.augment.items()})


def test_pairs(cfg: LabConfig, image_size: int):
    """Held-out pairs of the lab ``cfg`` (``captioner.world.scenes.held_out_pairs`` of its n_test and seed)."""
    return held_out_pairs(cfg.n_test, cfg.seed, image_size)


def _train_and_load(kind: str, cfg: LabConfig, data, out, progress: bool, steps: int, seed: int, **over):
    from pathlib import Path

    from captioner.errors import CaptionerError
    from captioner.jepa.model import build_model
    from captioner.jepa.train import RUNTIME_FIELDS, config_diff, load_checkpoint, resolve_config, train

    lr = cfg.lr if kind == "image-jepa" or cfg.text_lr is None else cfg.text_lr
    objective = dict(cfg.objective) if kind == "image-jepa" else {**cfg.objective, **cfg.text_objective}
    tc = resolve_config(kind, cfg.preset, corpus="scenelab", steps=steps, batch_size=cfg.batch_size, seed=seed,
                        lr=lr, save_every=max(1, steps // 4), text={**cfg.text, "embed_dim": cfg.embed_dim},
                        image={**cfg.image, "embed_dim": cfg.embed_dim},
                        objective=objective or None, **over,
                        init_from=str(kept_run(cfg.init_from, kind)) if cfg.init_from else None)
    if cfg.init_from and Path(tc.init_from).resolve() == Path(out).resolve():
        raise CaptionerError(f"scenelab --init-from {cfg.init_from}: that is this run's own folder; "
                             "choose another --out")
    ckpt = out / "checkpoint.pt"
    ck = load_checkpoint(ckpt) if ckpt.exists() else None
    if ck is not None:   # a finished run is reused, a killed one resumed: either only if trained as asked
        diff = config_diff(ck["config"], tc.to_dict(), ignore=RUNTIME_FIELDS)
        if diff:
            raise CaptionerError(f"{out} holds a run trained otherwise than asked ({'; '.join(diff)}); pass "
                                 "another --out, or delete that folder to retrain it")
    if ck is None or ck["step"] < steps:
        summary = train(tc, out, resume=ck is not None, data=data, progress=progress)
        ck = load_checkpoint(ckpt)
    else:
        summary = {"out": str(out), "reused": True}
    model = build_model(kind, tc.text, tc.image, tc.objective)
    model.load_state_dict(ck["model"])
    return model, tc, summary


def kept_run(lab_dir, kind: str):
    """The run folder of ``kind`` that a finished lab in ``lab_dir`` kept: ``<lab_dir>/<kind>``, or with
    restarts the one its scenelab.json names (``<kind>-r<i>``)."""
    import json
    from pathlib import Path

    lab_dir = Path(lab_dir)
    p = lab_dir / "scenelab.json"
    restarts = (json.loads(p.read_text()).get("restarts") or {}).get(kind) if p.is_file() else None
    return lab_dir / kept_name(kind, restarts)


def kept_name(kind: str, losses) -> str:
    """The run folder's name of the restart with the lowest final loss among ``losses`` [(seed, loss)]:
    ``kind`` for the first, ``kind``-r<i> for the others (``kind`` when there were none)."""
    if not losses:
        return kind
    i = min(range(len(losses)), key=lambda j: losses[j][1])
    return kind if i == 0 else f"{kind}-r{i}"


def final_loss(run, frac: float = 0.1) -> float:
    """Mean training loss over the last ``frac`` of a run's logged steps (its log.csv)."""
    from captioner.jepa.train import read_log

    log = read_log(run)
    tail = log[-max(1, int(len(log) * frac)):]
    return float(np.mean([r["loss"] for r in tail]))


def restarts_of(cfg: LabConfig, kind: str) -> int:
    """How many times ``kind`` is trained: ``text_restarts`` for the text JEPA when set, else ``restarts``."""
    n = cfg.text_restarts if kind == "text-jepa" and cfg.text_restarts is not None else cfg.restarts
    if n < 1:
        from captioner.errors import CaptionerError

        raise CaptionerError(f"scenelab restarts must be >= 1, not {n}")
    return n


RESTART_SEED_STEP = 1000   # restart r of a JEPA trains from init seed cfg.seed + RESTART_SEED_STEP x r


def _train_best(kind: str, cfg: LabConfig, data, out, progress: bool, steps: int, **over):
    """``_train_and_load`` ``restarts_of(cfg, kind)`` times (the first in ``out``, the others in ``out``-r1,
    ...), and the one with the lowest ``final_loss``; also returns [(seed, final loss)] and the model of
    every restart."""
    from pathlib import Path

    best, losses, models = None, [], []
    for r in range(restarts_of(cfg, kind)):
        run = Path(out) if r == 0 else Path(f"{out}-r{r}")
        init = cfg.seed + RESTART_SEED_STEP * r
        got = _train_and_load(kind, cfg, data, run, progress, steps, init, **over)
        losses.append((init, final_loss(run)))
        models.append(got[0])
        if best is None or losses[-1][1] < best[0]:
            best = (losses[-1][1], got)
    return (*best[1], losses, models)


def train_models(cfg: LabConfig, out, progress: bool = True, **over) -> dict:
    """The lab's world and its three trained encoders (reused or resumed from ``out``) and an untrained
    one: {"scenes", "corpus", "img_data", "max_len", "image", "text", "ntp", "untrained"}; "image" and
    "text" are ``_train_best``'s (model, config, summary, restart losses, restart models). ``over``: more
    TrainConfig settings for all three (e.g. ``device="auto"``; runtime fields only, or the checkpoints
    found in ``out`` are refused)."""
    import torch

    from captioner.jepa import views as V
    from captioner.jepa.model import build_model
    from captioner.jepa.train import resolve_config

    scenes = sample_scenes(cfg.n_train, seed=cfg.seed)
    corpus = V.ViewsCorpus("scenelab", [captions(sc, cfg.n_captions, seed=cfg.seed * 7919 + i)
                                        for i, sc in enumerate(scenes)], [sc.key() for sc in scenes])
    aug = augment_config(cfg)

    base = resolve_config("image-jepa", cfg.preset, text=cfg.text or None, image=cfg.image or None)
    img_data = V.ImageViews(render_array(scenes, cfg.n_renders, base.image.image_size, seed=cfg.seed), aug)
    image = _train_best("image-jepa", cfg, img_data, out / "image-jepa", progress, cfg.image_steps,
                        augment=asdict(aug), **over)
    text = _train_best("text-jepa", cfg, V.TokenViews(corpus, base.text.max_len), out / "text-jepa", progress,
                       cfg.text_steps, **over)
    ntp_model, _, _ = _train_and_load("ntp", cfg, V.TokenDocuments(corpus, base.text.max_len, seed=cfg.seed),
                                      out / "ntp", progress, cfg.text_steps, cfg.seed, **over)
    torch.manual_seed(cfg.seed)
    untrained = build_model("text-jepa", text[1].text, obj=text[1].objective)
    return {"scenes": scenes, "corpus": corpus, "img_data": img_data, "max_len": base.text.max_len,
            "image": image, "text": text, "ntp": ntp_model, "untrained": untrained}


def _project(p, X):
    return X if p is None else ((X - p[0]) @ p[1]).astype(np.float32)


def _score(cfg: LabConfig, t: dict, ims, caps, Z) -> dict:
    """``run_lab``'s rows (and view subspaces, restart residuals) for the trained models ``t``
    (``train_models``) on the held-out renders ``ims`` and captions ``caps`` of scenes with latents ``Z``."""
    view_k = (LATENT_DIM if cfg.embed_dim > LATENT_DIM else 0) if cfg.view_k is None else cfg.view_k
    n_fit = min(cfg.view_fit, len(t["scenes"]))
    max_len = t["max_len"]

    def fit_view(model, side):
        """view_subspace of a JEPA on two training views of the first n_fit scenes (renders / captions 0, 1)."""
        if side == "image":
            a, b = (_embed_uint8(model, t["img_data"].images[:n_fit, r]) for r in (0, 1))
        else:
            a, b = (embed_texts(model, "text-jepa", [c[r] for c in t["corpus"].scenes[:n_fit]], max_len)
                    for r in (0, 1))
        return view_subspace(a, b, view_k)

    img_model, tj_model = t["image"][0], t["text"][0]
    proj = {"image": fit_view(img_model, "image"), "text": fit_view(tj_model, "text")} if view_k else {}
    Ximg = _project(proj.get("image"), embed_images(img_model, ims))
    rows = [{"side": "image JEPA (two renders)", "views": "good", "vs": "latents",
             "mutual_knn": mutual_knn(Ximg, Z, cfg.k), "procrustes_residual": procrustes_residual(Ximg, Z)}]
    # the baselines have no good views to fit a view subspace on: scored raw
    # the next-token LM twice: at the mean of its final states, and at its last token (the closing [SEP],
    # having read the whole caption), the same model
    sides = [("text JEPA (two paraphrases)", "good", tj_model, proj.get("text"), "mean"),
             ("next-token LM (one document)", "bad", t["ntp"], None, "mean"),
             ("next-token LM, last token", "bad", t["ntp"], None, "last"),
             ("untrained text encoder", "none", t["untrained"], None, "mean")]
    for name, views, m, p, pool in sides:
        Xt = _project(p, embed_texts(m, "ntp" if views == "bad" else "text-jepa", caps, max_len, pool=pool))
        rows.append({"side": name, "views": views, "vs": "image JEPA",
                     "mutual_knn": mutual_knn(Xt, Ximg, cfg.k), "procrustes_residual": procrustes_residual(Xt, Ximg),
                     "mutual_knn_latents": mutual_knn(Xt, Z, cfg.k),
                     "procrustes_residual_latents": procrustes_residual(Xt, Z)})
    res: dict = {"rows": rows}
    if proj:
        res["view_eigenvalues"] = {side: [float(v) for v in p[2]] for side, p in proj.items()}
        res["view_k"] = view_k
    if max(restarts_of(cfg, "image-jepa"), restarts_of(cfg, "text-jepa")) > 1:
        res["restarts"] = {"image-jepa": t["image"][3], "text-jepa": t["text"][3]}
        # scored against the latents after the choice (which used the training loss only), to check it
        res["restart_residuals"] = {
            "image-jepa": [procrustes_residual(_project(fit_view(m, "image") if view_k else None,
                                                        embed_images(m, ims)), Z) for m in t["image"][4]],
            "text-jepa": [procrustes_residual(_project(fit_view(m, "text") if view_k else None,
                                                       embed_texts(m, "text-jepa", caps, max_len)), Z)
                          for m in t["text"][4]]}
    return res


def run_lab(cfg: LabConfig | None = None, out=None, progress: bool = True) -> dict:
    """Train an image JEPA (two renders of one scene), a text JEPA (two paraphrases) and the NTP baseline
    (a scene's captions as one document) on ``cfg.n_train`` scenes; compare on ``cfg.n_test`` held-out pairs.

    Returns
    -------
    dict with "rows" (one per text side: mutual k-NN with the image JEPA, held-out Procrustes residual, and
    the same against the ground-truth latents), "config" and "seconds". Written as JSON + Markdown to
    ``out`` (default ``<home>/runs/scenelab``), reusing trained checkpoints found there.
    """
    import time
    from pathlib import Path

    from captioner.paths import atomic_write_json, subdir

    cfg = cfg or LabConfig()
    out = Path(out) if out else subdir("runs") / "scenelab"
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    t = train_models(cfg, out, progress)
    test_scenes, ims, caps = test_pairs(cfg, t["image"][1].image.image_size)
    Z = latent_features(test_scenes)
    scored = _score(cfg, t, ims, caps, Z)
    res = {"config": asdict(cfg), "rows": scored.pop("rows"), "n_test": len(test_scenes), "k": cfg.k,
           "chance_mutual_knn": cfg.k / (len(test_scenes) - 1),
           "mutual_knn_ceiling": mutual_knn_ceiling(Z, cfg.k, seed=cfg.seed), "seconds": round(time.time() - t0, 1),
           **scored}
    atomic_write_json(out / "scenelab.json", res)
    (out / "scenelab.md").write_text(format_table(res) + "\n")
    return res


def format_table(res: dict) -> str:
    """Markdown table of ``run_lab``'s result."""
    k = res["k"]
    lines = [f"| representation | views | vs | mutual {k}-NN | Procrustes residual | mutual {k}-NN vs latents "
             "| residual vs latents |", "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for r in res["rows"]:
        lat = (f"{r['mutual_knn_latents']:.3f} | {r['procrustes_residual_latents']:.3f}"
               if "mutual_knn_latents" in r else "- | -")
        lines.append(f"| {r['side']} | {r['views']} | {r['vs']} | {r['mutual_knn']:.3f} | "
                     f"{r['procrustes_residual']:.3f} | {lat} |")
    ceiling = (f", ceiling (the latents vs a rotation of them + 1% noise) = {res['mutual_knn_ceiling']:.3f}"
               if "mutual_knn_ceiling" in res else "")
    lines.append(f"\n{res['n_test']} held-out scenes (distinct), chance mutual {k}-NN = "
                 f"{res['chance_mutual_knn']:.3f}{ceiling}; residual: held-out, after a rotation + scale fitted on the "
                 f"other half (0 = same space up to a rotation, 1 = unrelated); {res['seconds']} s.")
    for side, lam in (res.get("view_eigenvalues") or {}).items():
        kk = res["view_k"]
        nxt = f", then {lam[kk]:.3f} .. {lam[-1]:.3f}" if len(lam) > kk else ""
        lines.append(f"{side} JEPA scored on its {kk} most view-predictable of {len(lam)} directions "
                     f"(view_subspace; cross-view correlation {lam[0]:.3f} .. {lam[kk - 1]:.3f}{nxt}).")
    for kind, losses in (res.get("restarts") or {}).items():
        best = min(losses, key=lambda x: x[1])
        lines.append(f"{kind}: {len(losses)} restarts, final training loss "
                     + ", ".join(f"{v:.4f} (seed {sd})" for sd, v in losses) + f"; kept seed {best[0]}.")
        resid = (res.get("restart_residuals") or {}).get(kind)
        if resid:
            lines.append(f"{kind}: residual vs latents per restart (not used to choose) "
                         + ", ".join(f"{v:.3f}" for v in resid) + ".")
    conf = res.get("config") or {}
    if conf.get("init_from"):
        reg = (conf.get("objective") or {}).get("reg", "sigreg")
        lines.append(f"Each model started from its checkpoint in {conf['init_from']} (fine-tuned with reg {reg}).")
    return "\n".join(lines)
