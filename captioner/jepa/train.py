"""Training loop for the JEPAs and the next-token baseline, through accelerate (one CPU, one GPU or several,
same code).

A run lives in one folder::

    out/checkpoint.pt    model + optimizer + step + RNG state + resolved config (written atomically)
    out/config.json      the resolved config (what `captioner train` was asked, with preset values filled in)
    out/log.csv          step, loss, pred, reg, lr, seconds: one row per step
    out/summary.json     written when the run completes

Each step's global batch comes from generators seeded by (seed, step), each process training on its slice
(``captioner.jepa.processes``), so a resumed run continues exactly as an uninterrupted one would, under
any number of processes. A non-finite loss stops the run before the bad update; the last good checkpoint
stays as it was.
"""
from __future__ import annotations

import csv
import json
import logging
import math
import os
import random
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from captioner.errors import CacheMismatchError, CaptionerError
from captioner.jepa.model import KINDS, ImageConfig, ObjectiveConfig, TextConfig
from captioner.jepa.processes import RUNTIME_FIELDS  # noqa: F401  (read here by the lab and tests)
from captioner.jepa.views import AugmentConfig

PRESET_DIR = Path(__file__).parent / "presets"
CHECKPOINT = "checkpoint.pt"
FORMAT = "captioner-jepa/1"


class TrainingDiverged(CaptionerError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


class PresetMismatchError(CacheMismatchError):
    """A checkpoint trained with another preset, kind or architecture than the one asked for."""


@dataclass
class TrainConfig:
    kind: str = "text-jepa"                # text-jepa | ntp | image-jepa
    preset: str = "tiny"
    corpus: str = "cupl"                   # cupl | scenelab | FILE.json (text); scenelab | dataset name (image)
    n_scenes: int | None = None            # first n scenes of the corpus (all when None)
    steps: int = 300
    batch_size: int = 64                   # global: split over processes
    lr: float = 2e-3
    min_lr_frac: float = 0.1
    warmup: int = 20
    weight_decay: float = 0.05
    grad_clip: float = 1.0
    save_every: int = 100
    seed: int = 0
    device: str = "cpu"                    # cpu | auto (accelerate picks the GPU(s) when present)
    precision: str = "no"                  # no | bf16 | fp16 (autocast through accelerate)
    threads: int = 0                       # torch intra-op threads on CPU (0: torch's default); tiny models
                                           # run faster on 1 than on 2 contended cores
    init_from: str | None = None           # a checkpoint (file or run folder) of the same kind and architecture
                                           # whose weights start this run at step 0 with a fresh optimizer
                                           # (fine-tuning, e.g. with another objective); a resumed run ignores it
    text: TextConfig = field(default_factory=TextConfig)
    image: ImageConfig = field(default_factory=ImageConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        d = dict(d)
        sub = {"text": TextConfig, "image": ImageConfig, "objective": ObjectiveConfig, "augment": AugmentConfig}
        for k, c in sub.items():
            if k in d and isinstance(d[k], dict):
                d[k] = _make(c, d[k], f"{k} config")
        return _make(cls, d, "train config")

    def model_signature(self) -> dict:
        """What must match for a checkpoint to be resumed or loaded as this model."""
        sig = {"kind": self.kind, "preset": self.preset}
        if self.kind == "image-jepa":
            sig["image"] = asdict(self.image)
        else:
            sig["text"] = asdict(self.text)
        if self.kind != "ntp":
            sig["objective"] = asdict(self.objective)
        return sig


def _make(cls, d: dict, what: str):
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise CaptionerError(f"{what}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
    kw = {k: (tuple(v) if isinstance(v, list) and cls is AugmentConfig else v) for k, v in d.items()}
    return cls(**kw)


def list_presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.json"))


def load_preset(name: str) -> dict:
    """A preset by name (``captioner/jepa/presets/<name>.json``) or by path to a JSON file."""
    p = Path(name)
    if not p.suffix == ".json":
        p = PRESET_DIR / f"{name}.json"
    if not p.is_file():
        raise CaptionerError(f"unknown preset {name!r}; known: {', '.join(list_presets())} (or a path to a .json)")
    return json.loads(p.read_text())


def resolve_config(kind: str, preset: str = "tiny", **overrides) -> TrainConfig:
    """Preset values, then any non-None ``overrides`` (top-level fields, or ``text=dict(...)`` etc.)."""
    if kind not in KINDS:
        raise CaptionerError(f"unknown model kind {kind!r}; choose one of {', '.join(KINDS)}")
    p = load_preset(preset)
    d: dict = {"kind": kind, "preset": Path(preset).stem if preset.endswith(".json") else preset}
    for k in ("text", "image", "objective", "augment"):
        if k in p:
            d[k] = dict(p[k])
    d.update(p.get("train", {}))
    for k, v in overrides.items():
        if v is None:
            continue
        if k in ("text", "image", "objective", "augment") and isinstance(v, dict):
            d.setdefault(k, {}).update(v)
        else:
            d[k] = v
    return TrainConfig.from_dict(d)


# ---------------------------------------------------------------------------------------------- data
def build_data(cfg: TrainConfig, warn: bool = True):
    """The batch source for ``cfg``: TokenViews (text-jepa), TokenDocuments (ntp) or ImageViews."""
    from captioner.jepa import views as V

    if cfg.kind == "image-jepa":
        if cfg.corpus == "scenelab":
            from captioner.world.scenes import image_corpus

            arr = image_corpus(cfg.n_scenes or 2000, size=cfg.image.image_size, seed=cfg.seed)
        else:
            from captioner.datasets import get_dataset
            from captioner.images import load_image

            ds = get_dataset(cfg.corpus, split="train")
            srcs = [s.source for s in ds.samples[: cfg.n_scenes or None]]
            ims = [s() if callable(s) else load_image(s) for s in srcs]
            if len(ims) < 2:
                raise CaptionerError(f"image corpus {cfg.corpus!r}: {len(ims)} image(s); need at least 2")
            arr = V.pil_to_uint8(ims, cfg.image.image_size)
        return V.ImageViews(arr, cfg.augment)
    corpus = V.load_views(cfg.corpus, n_scenes=cfg.n_scenes, seed=cfg.seed)
    if cfg.kind == "ntp":
        return V.TokenDocuments(corpus, cfg.text.max_len, seed=cfg.seed)
    return V.TokenViews(corpus, cfg.text.max_len, warn=warn)


# --------------------------------------------------------------------------------------- checkpoints
def save_checkpoint(path: Path, state: dict) -> None:
    """torch.save into a temp file in the same folder, then os.replace: a kill never leaves half a file."""
    import torch

    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_checkpoint(path: str | Path) -> dict:
    """A checkpoint dict from a run folder or a ``checkpoint.pt``; CaptionerError if missing or foreign."""
    import torch

    p = Path(path)
    if p.is_dir():
        p = p / CHECKPOINT
    if not p.is_file():
        raise CaptionerError(f"no JEPA checkpoint at {path} (expected a run folder with {CHECKPOINT}); "
                             "train one with `captioner train`")
    try:
        ck = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated or foreign file: say which, never start from zero silently
        raise CaptionerError(f"{p}: not a readable JEPA checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(ck, dict) or ck.get("format") != FORMAT:
        raise CaptionerError(f"{p}: not a captioner JEPA checkpoint (format {ck.get('format') if isinstance(ck, dict) else '?'!r})")
    ck["path"] = str(p)
    return ck


# how a run is executed, not what it learns: free to differ between a checkpoint and the run reusing it


def config_diff(saved: dict, asked: dict, ignore: tuple = ()) -> list[str]:
    """'field: checkpoint's vs asked' for every setting (nested ones as ``a.b``) in which a checkpoint's
    config (or model signature) ``saved`` differs from the one ``asked`` for; top-level fields in
    ``ignore`` (e.g. ``RUNTIME_FIELDS``) and fields only the checkpoint has (bookkeeping such as parameter
    counts) aside. Tuples and lists compare alike."""
    a, b = json.loads(json.dumps(saved)), json.loads(json.dumps(asked))

    def walk(x, y, prefix):
        out = []
        for k in sorted(y):
            if not prefix and k in ignore:
                continue
            if isinstance(x.get(k), dict) and isinstance(y[k], dict):
                out += walk(x[k], y[k], f"{prefix}{k}.")
            elif x.get(k) != y[k]:
                out.append(f"{prefix}{k}: {x.get(k)!r} (checkpoint) vs {y[k]!r} (asked)")
        return out

    return walk(a, b, "")


def check_compatible(saved: dict, cfg: TrainConfig, where: str) -> None:
    """Refuse a checkpoint from another preset, kind or architecture, naming both."""
    s = TrainConfig.from_dict(saved)
    if (s.kind, s.preset) != (cfg.kind, cfg.preset):
        raise PresetMismatchError(
            f"{where} was trained as {s.kind} with preset {s.preset!r}, but this run asks for {cfg.kind} with "
            f"preset {cfg.preset!r}; use --preset {s.preset} to resume it, or another --out to start afresh")
    a, b = s.model_signature(), cfg.model_signature()
    if a != b:
        raise PresetMismatchError(f"{where}: preset {s.preset!r} architecture differs from the checkpoint's: "
                                  + "; ".join(config_diff(a, b)))
    if s.corpus != cfg.corpus:
        raise PresetMismatchError(f"{where} was trained on corpus {s.corpus!r}, this run asks for {cfg.corpus!r}")


def warm_start(model, cfg: TrainConfig, where: str | Path) -> int:
    """Load the weights of the checkpoint at ``where`` into ``model`` (built from ``cfg``) for a fresh run.

    The kind, preset and architecture must match (the objective may differ). Every encoder / backbone
    tensor must load; the predictor loads when all its shapes match (another ``pred_hidden`` starts it
    afresh). Returns the number of tensors loaded; PresetMismatchError otherwise.
    """
    ck = load_checkpoint(where)
    s = TrainConfig.from_dict(ck["config"])
    a, b = s.model_signature(), cfg.model_signature()
    a.pop("objective", None)
    b.pop("objective", None)
    if a != b:
        raise PresetMismatchError(f"--init-from {where}: not the same model as this run's; "
                                  + "; ".join(config_diff(a, b)))
    own, saved = model.state_dict(), ck["model"]
    take = {}
    for part in {k.split(".")[0] for k in own}:   # whole parts only: no predictor half from each model
        keys = [k for k in own if k.split(".")[0] == part]
        if all(k in saved and saved[k].shape == own[k].shape for k in keys):
            take.update({k: saved[k] for k in keys})
    core = [k for k in own if k.split(".")[0] in ("encoder", "backbone") and k not in take]
    if core:
        raise PresetMismatchError(f"--init-from {where}: the checkpoint lacks {len(core)} encoder tensor(s) of "
                                  f"this model (first: {core[0]})")
    model.load_state_dict(take, strict=False)
    return len(take)


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Linear warm-up for ``warmup`` steps, then cosine down to ``min_lr_frac * lr``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def _optimizer(model, cfg: TrainConfig):
    import torch

    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.98))


def _to(batch: dict, device) -> dict:
    import torch

    def mv(x):
        if isinstance(x, torch.Tensor):
            return x.to(device, non_blocking=True)
        if isinstance(x, tuple):
            return tuple(mv(y) for y in x)
        return x

    return {k: mv(v) for k, v in batch.items()}


def _truncate_log(log: Path, step: int) -> float:
    """Drop log rows past the checkpoint's step: that progress was lost with the kill. Returns the
    ``seconds`` of the last row kept, from which a resumed run's clock continues (0.0 without one)."""
    if not log.exists():
        return 0.0
    with open(log, newline="") as f:
        rows = list(csv.reader(f))
    keep = [rows[0]] + [r for r in rows[1:] if r and int(r[0]) <= step] if rows else []
    with open(log, "w", newline="") as f:
        csv.writer(f).writerows(keep)
    try:
        return float(keep[-1][5]) if len(keep) > 1 else 0.0
    except (IndexError, ValueError):
        return 0.0


def train(cfg: TrainConfig, out: str | Path, resume: bool = False, data=None, progress: bool = True,
          callback=None) -> dict:
    """Long: the training loop's state (model, optimizer, EMA target, step, log, checkpoint cadence) lives in
    one frame so that a resume restores exactly what a step reads; its parts are in ``processes`` and ``views``.

    Train ``cfg.kind`` for ``cfg.steps`` steps, checkpointing every ``cfg.save_every`` into ``out``.

    Parameters
    ----------
    cfg : the resolved config (``resolve_config``).
    out : run folder; must not hold a checkpoint unless ``resume``.
    resume : continue from ``out/checkpoint.pt`` when there is one (refused if preset or kind differ).
    data : a batch source (``build_data(cfg)`` when None); the scene lab passes its own.
    callback : ``callback(step, loss)`` after each step (tests use it to simulate a kill).

    Returns
    -------
    dict: out, step, first_loss, last_loss, seconds, samples_per_s, params.

    Raises
    ------
    TrainingDiverged on a non-finite loss (nothing of the bad step is saved);
    PresetMismatchError on a checkpoint from another preset/kind; CaptionerError on bad corpora.
    """
    import torch
    from tqdm.auto import tqdm

    from captioner.distributed import collective
    from captioner.jepa.model import build_model, count_params
    from captioner.jepa.processes import (
        check_processes,
        make_accelerator,
        python_rng_from_list,
        python_rng_to_list,
        step_batch,
    )
    from captioner.paths import atomic_write_json

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt_path = out / CHECKPOINT
    ck = None
    if ckpt_path.exists():
        if not resume:
            raise CaptionerError(f"{out} already holds a checkpoint; pass --resume to continue it, or choose "
                                 "another --out")
        ck = load_checkpoint(ckpt_path)
        check_compatible(ck["config"], cfg, str(ckpt_path))
    elif resume:
        logging.getLogger("captioner").warning("%s: no checkpoint to resume (no %s); starting from step 0",
                                               out, CHECKPOINT)

    acc = make_accelerator(cfg)
    old_threads = torch.get_num_threads()
    if cfg.threads and acc.device.type == "cpu":
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.kind, cfg.text, cfg.image, cfg.objective)
    opt = _optimizer(model, cfg)
    start = 0
    if ck is not None:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        start = int(ck["step"])
        rng_state = ck.get("rng", {})
        if "torch" in rng_state:
            torch.set_rng_state(rng_state["torch"])
        if "python" in rng_state:
            random.setstate(python_rng_from_list(rng_state["python"]))
    if data is None:
        data = build_data(cfg)
    if cfg.kind == "ntp" and hasattr(data, "vocab"):
        model.restrict_vocab(data.vocab())
    if ck is None and cfg.init_from:
        warm_start(model, cfg, cfg.init_from)
    n_params = count_params(model)
    resolved = cfg.to_dict()
    resolved["params"] = n_params
    resolved["encoder_params"] = count_params(model.encoder if hasattr(model, "encoder") else model.backbone)
    resolved["n_truncated_texts"] = int(getattr(data, "n_truncated", 0))
    if acc.is_main_process:
        atomic_write_json(out / "config.json", resolved)
    check_processes(acc, cfg, out, resume, start, data, n_params)
    if acc.num_processes > 1:
        from captioner.distributed import sync_batchnorm

        # BatchNorm then normalises over the global batch rather than each process's slice of it
        model = sync_batchnorm(model)
    model, opt = acc.prepare(model, opt)
    raw = acc.unwrap_model(model)

    log = out / "log.csv"
    # the log's seconds run on across resumes; one process rewrites it (two at once lost its first rows)
    clock = _truncate_log(log, start) if acc.is_main_process else 0.0
    new_log = not log.exists() or log.stat().st_size == 0
    logf = open(log, "a", newline="") if acc.is_main_process else None
    writer = csv.writer(logf) if logf else None
    if writer and new_log:
        writer.writerow(["step", "loss", "pred", "reg", "lr", "seconds"])

    last_saved = start if ck is not None else None
    first_loss = last_loss = None
    t0 = time.time()
    bar = tqdm(total=cfg.steps, initial=start, desc=f"train {cfg.kind}/{cfg.preset}", unit="step",
               disable=not progress or not acc.is_main_process, leave=False)

    def save(step: int):
        if acc.is_main_process:
            state = {"format": FORMAT, "config": cfg.to_dict(), "step": step,
                     "model": raw.state_dict(), "optimizer": opt.state_dict(),
                     "rng": {"torch": torch.get_rng_state(), "python": python_rng_to_list(random.getstate())},
                     "params": n_params}
            save_checkpoint(ckpt_path, state)
        acc.wait_for_everyone()

    try:
        model.train()
        for step in range(start, cfg.steps):
            lr = lr_at(cfg, step)
            for g in opt.param_groups:
                g["lr"] = lr
            if hasattr(raw, "progress"):
                raw.progress = step / max(1, cfg.steps)   # a function of the step: the same after a resume
            batch, gen = step_batch(data, cfg, step, acc.process_index, acc.num_processes)
            batch = _to(batch, acc.device)
            with collective(f"training step {step + 1}"):
                with acc.autocast():
                    res = model(**batch, generator=gen)
                loss = res["loss"]
                # the global batch's loss, prediction and regulariser terms (their mean over processes)
                lval, pval, rval = acc.reduce(torch.stack([loss.detach().float(), res["pred"].float().reshape(()),
                                                           res["reg"].float().reshape(())]), reduction="mean").tolist()
            if not math.isfinite(lval):
                kept = (f"the last good checkpoint (step {last_saved}) is kept at {ckpt_path}"
                        if last_saved is not None else "no checkpoint had been saved yet")
                raise TrainingDiverged(f"loss is {lval} at step {step + 1} of {cfg.kind}/{cfg.preset}; stopped "
                                       f"before the update: {kept}. Lower --lr (now {cfg.lr:g}) or raise the "
                                       "regulariser weight, then --resume")
            with collective(f"training step {step + 1}"):
                acc.backward(loss)
                if cfg.grad_clip:
                    acc.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if hasattr(raw, "update_target"):
                raw.update_target()
            first_loss = lval if first_loss is None else first_loss
            last_loss = lval
            if writer:
                writer.writerow([step + 1, f"{lval:.6g}", f"{pval:.6g}", f"{rval:.6g}",
                                 f"{lr:.6g}", f"{clock + time.time() - t0:.3f}"])
            bar.update(1)
            bar.set_postfix(loss=f"{lval:.4f}")
            if (step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps:
                if logf:
                    logf.flush()
                with collective(f"the checkpoint at step {step + 1}"):
                    save(step + 1)
                last_saved = step + 1
            if callback is not None:
                callback(step + 1, lval)
    finally:
        torch.set_num_threads(old_threads)
        bar.close()
        if logf:
            logf.close()
    secs = time.time() - t0
    done = max(0, cfg.steps - start)
    summary = {"out": str(out), "kind": cfg.kind, "preset": cfg.preset, "step": cfg.steps, "resumed_from": start,
               "first_loss": first_loss, "last_loss": last_loss, "seconds": round(secs, 3),
               "samples_per_s": round(done * cfg.batch_size / secs, 2) if secs > 0 and done else None,
               "params": n_params, "device": str(acc.device)}
    if acc.is_main_process:
        atomic_write_json(out / "summary.json", summary)
    return summary


def read_log(out: str | Path) -> list[dict]:
    """The per-step log of a run as a list of dicts (floats)."""
    with open(Path(out) / "log.csv", newline="") as f:
        return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
