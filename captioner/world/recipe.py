"""The world's training recipe: the scene lab's configuration (``LabConfig``) and its training of an image
JEPA (two renders of one scene), a text JEPA (two paraphrases) and the next-token baseline (a scene's captions
as one document) through ``captioner train``'s accelerate loop (``train_models``), with restarts kept by their
final training loss (``kept_name``). ``captioner world train`` trains the world with it; the scene lab
experiment (``eval.scenelab.lab``) scores what it trains."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from captioner.world.scenes import LATENT_DIM, captions, render_array, sample_scenes


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
    # which scenes the JEPAs and the NTP baseline train on (``training_scenes``): "all" draws over all 324
    # scenes; "train" only over the train scenes of the seed's world split (``captioner.world.data.scene_splits``,
    # the split the report scores on), so its val and test scenes are compositions no encoder has seen
    scenes: str = "all"
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
    # the share of the training captions that leave out one attribute (chosen uniformly), as captions written
    # by people do (``captions(omit=...)``); 0: every caption names all five. A text JEPA trained on complete
    # captions only puts a caption that omits an attribute near one of its values, not at its mean
    # (docs/results/world.md, "Priors that differ between modalities")
    caption_omit: float = 0.0
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


SCENES = ("all", "train")


def training_scenes(cfg: LabConfig) -> list:
    """The ``cfg.n_train`` scenes the encoders train on: drawn uniformly with repetition from all scenes
    (``cfg.scenes`` "all", as ever) or from the train scenes of the world split of ``cfg.seed`` ("train": no
    val or test scene among them; refused in one line when some attribute value would go unseen)."""
    from captioner.errors import CaptionerError

    if cfg.scenes == "all":
        return sample_scenes(cfg.n_train, seed=cfg.seed)
    if cfg.scenes != "train":
        raise CaptionerError(f"unknown training scenes {cfg.scenes!r}; choose one of {', '.join(SCENES)}")
    from captioner.world.data import scene_splits

    splits = scene_splits(cfg.seed)
    pool = splits["train"]
    check_values_seen(pool, f"the train scenes of world seed {cfg.seed}",
                      "train with --scenes all, or pick another --seed")
    rng = np.random.default_rng(cfg.seed)
    scenes = [pool[i] for i in rng.integers(len(pool), size=cfg.n_train)]
    check_values_seen(scenes, f"the {cfg.n_train} training scenes drawn for seed {cfg.seed}",
                      "train on more scenes (n_train) or with --scenes all")
    held = {sc.key() for name in ("val", "test") for sc in splits[name]} & {sc.key() for sc in scenes}
    if held:   # the split's own guarantee (disjoint splits), checked where the encoders' data is made
        raise RuntimeError(f"held-out scenes among the training scenes: {sorted(held)[:3]}")
    return scenes


def check_values_seen(scenes: list, what: str, fix: str) -> None:
    """One-line error when some value of some attribute appears in none of ``scenes``: the encoders would
    never see it, and held-out scenes with it would be out of the world they learnt, not new compositions."""
    from captioner.errors import CaptionerError
    from captioner.world import scenes as W

    for a, values in W.ATTRS.items():
        seen = {getattr(sc, a) for sc in scenes}
        missing = [v for v in values if v not in seen]
        if missing:
            raise CaptionerError(f"{what} never show {a} {', '.join(map(str, missing))}: the encoders would not "
                                 f"see every attribute value; {fix}")


def augment_config(cfg: LabConfig):
    """``cfg.augment`` (JSON-friendly lists) as the views' AugmentConfig (tuples)."""
    from captioner.jepa.views import AugmentConfig

    return AugmentConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in cfg.augment.items()})


def train_and_load(kind: str, cfg: LabConfig, data, out, progress: bool, steps: int, seed: int, **over):
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
    """How many times ``kind`` (image-jepa, text-jepa, ntp) is trained: ``text_restarts`` for the text JEPA when
    set, else ``restarts``."""
    n = cfg.text_restarts if kind == "text-jepa" and cfg.text_restarts is not None else cfg.restarts
    if n < 1:
        from captioner.errors import CaptionerError

        raise CaptionerError(f"scenelab restarts must be >= 1, not {n}")
    return n


RESTART_SEED_STEP = 1000   # restart r of a JEPA trains from init seed cfg.seed + RESTART_SEED_STEP x r


def _train_best(kind: str, cfg: LabConfig, data, out, progress: bool, steps: int, **over):
    """``train_and_load`` ``restarts_of(cfg, kind)`` times (the first in ``out``, the others in ``out``-r1,
    ...), and the one with the lowest ``final_loss``; also returns [(seed, final loss)] and the model of
    every restart."""
    from pathlib import Path

    best, losses, models = None, [], []
    for r in range(restarts_of(cfg, kind)):
        run = Path(out) if r == 0 else Path(f"{out}-r{r}")
        init = cfg.seed + RESTART_SEED_STEP * r
        got = train_and_load(kind, cfg, data, run, progress, steps, init, **over)
        losses.append((init, final_loss(run)))
        models.append(got[0])
        if best is None or losses[-1][1] < best[0]:
            best = (losses[-1][1], got)
    return (*best[1], losses, models)


def caption_corpus(cfg: LabConfig, scenes: list):
    """The text side's training corpus: ``cfg.n_captions`` captions of each training scene (a scene's captions
    are the text JEPA's views and the next-token model's document), ``cfg.caption_omit`` of them leaving out
    one attribute."""
    from captioner.jepa import views as V

    return V.ViewsCorpus("scenelab", [captions(sc, cfg.n_captions, seed=cfg.seed * 7919 + i, omit=cfg.caption_omit)
                                      for i, sc in enumerate(scenes)], [sc.key() for sc in scenes])


def train_text_jepa(cfg: LabConfig, out, progress: bool = True, corpus=None, **over):
    """The text JEPA of ``train_models`` (its restarts, the lowest final loss kept) on ``corpus`` (default
    ``caption_corpus`` of the training scenes), in ``out``: alone, e.g. one trained on captions that omit
    attributes (``cfg.caption_omit``) beside a world whose other models are unchanged. Returns
    ``_train_best``'s tuple."""
    from pathlib import Path

    from captioner.jepa import views as V
    from captioner.jepa.train import resolve_config

    base = resolve_config("text-jepa", cfg.preset, text=cfg.text or None, image=cfg.image or None)
    if corpus is None:
        corpus = caption_corpus(cfg, training_scenes(cfg))
    return _train_best("text-jepa", cfg, V.TokenViews(corpus, base.text.max_len), Path(out), progress,
                       cfg.text_steps, **over)


def train_models(cfg: LabConfig, out, progress: bool = True, **over) -> dict:
    """The lab's world and its three trained encoders (reused or resumed from ``out``) and an untrained
    one: {"scenes", "corpus", "img_data", "max_len", "image", "text", "ntp", "untrained"}; "image", "text" and
    "ntp" are ``_train_best``'s (model, config, summary, restart losses, restart models): one policy for every
    encoder, ``restarts`` runs and the lowest final loss kept. ``over``: more
    TrainConfig settings for all three (e.g. ``device="auto"``; runtime fields only, or the checkpoints
    found in ``out`` are refused)."""
    import torch

    from captioner.jepa import views as V
    from captioner.jepa.model import build_model
    from captioner.jepa.train import resolve_config

    scenes = training_scenes(cfg)
    corpus = caption_corpus(cfg, scenes)
    aug = augment_config(cfg)

    base = resolve_config("image-jepa", cfg.preset, text=cfg.text or None, image=cfg.image or None)
    img_data = V.ImageViews(render_array(scenes, cfg.n_renders, base.image.image_size, seed=cfg.seed), aug)
    image = _train_best("image-jepa", cfg, img_data, out / "image-jepa", progress, cfg.image_steps,
                        augment=asdict(aug), **over)
    text = train_text_jepa(cfg, out / "text-jepa", progress, corpus=corpus, **over)
    ntp = _train_best("ntp", cfg, V.TokenDocuments(corpus, base.text.max_len, seed=cfg.seed), out / "ntp",
                      progress, cfg.text_steps, **over)
    torch.manual_seed(cfg.seed)
    untrained = build_model("text-jepa", text[1].text, obj=text[1].objective)
    return {"scenes": scenes, "corpus": corpus, "img_data": img_data, "max_len": base.text.max_len,
            "image": image, "text": text, "ntp": ntp, "untrained": untrained}
