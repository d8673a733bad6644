"""The alignment scaling law: how many samples a text encoder needs to align with an image encoder.

For each method (the text JEPA with good views, the next-token LM with bad views), sample count n
(samples seen in training = steps x batch) and seed, train a run in the scene lab, embed held-out
captions, and measure mutual k-NN against the image JEPA's embeddings of the matching renders. Then fit

.. math:: a(n) = a_\\infty - b \\, n^{-c}

(scipy ``curve_fit``) on the smaller n, predict the largest n, and compare the error with the seed
spread there. The same for a logistic in log n between chance and the world's ceiling (the score of a
perfect representation), both fixed before any run:

.. math:: a(n) = lo + (hi - lo) / (1 + (n_{50} / n)^c)

which follows the slow start that the power law, with no floor, cannot. Invert the full fits to get the
sample ratio NTP / JEPA at equal alignment (the paper reports ~42x on real data). Every run's result is a small JSON file under ``out/runs``; a second call
skips runs already done, and a run killed half way resumes from its checkpoint.
"""
from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class ScalingConfig:
    name: str = "cpu"
    model_preset: str = "tiny"
    methods: list = field(default_factory=lambda: ["text-jepa", "ntp"])
    ns: list = field(default_factory=lambda: [256, 512, 1024, 2048, 4096])   # samples seen
    # more sample counts for one method only (e.g. NTP further out, where it might start to align); they
    # join that method's law and the ratio bound
    extra_ns: dict = field(default_factory=dict)
    seeds: list = field(default_factory=lambda: [0, 1, 2])
    batch_size: int = 32
    lr: float = 4e-3              # as the scene lab
    embed_dim: int = 12           # the scene lab's LATENT_DIM
    n_train: int = 3000           # scene-lab training scenes (text corpus and image renders)
    n_test: int = 324             # held-out (render, caption) pairs: every scene-lab scene once
    image_steps: int = 300
    image_batch: int = 64
    k: int = 10
    world_seed: int = 0
    # train every run as ``captioner scenelab`` trains its models (its objective: SIGReg weight 0.1 and
    # linear predictors; its warm-up and checkpoints; the image JEPA with its steps), with this config's
    # n_train, batch_size, lr and embed_dim: the largest JEPA run is then the lab's text JEPA, its steps
    # and seed the lab's. False: the short runs of the cpu preset (preset objective, warm-up n / 10)
    lab: bool = False


PRESETS = {
    # about 20 minutes on one core: tiny models, 5 sample counts x 3 seeds x 2 methods, NTP also further out
    # (to 262,144 samples, where a ratio bound above the paper's 42x becomes possible)
    "cpu": ScalingConfig(extra_ns={"ntp": [16384, 65536, 262144]}),
    # seconds: for tests of the machinery only
    "quick": ScalingConfig(name="quick", ns=[64, 128, 256, 512], seeds=[0, 1], batch_size=16,
                           extra_ns={"ntp": [1024]}, n_train=200,
                           n_test=60, image_steps=20, image_batch=32, k=5),
    # the scene lab's own training, from 100 to 3200 steps of batch 64 (the lab's text budget) on its
    # 12,000 scenes, both methods at the same budgets, NTP also at 8x its largest (to 25,600 steps, where
    # a ratio bound above the paper's 42x becomes possible), read at its mean (the issue's baseline) and
    # at its last token (same models); the JEPA also below 100 steps, where NTP's last token gets to. About
    # 2.5 hours on 2 cores with --workers 2
    "lab": ScalingConfig(name="lab", lab=True, methods=["text-jepa", "ntp", "ntp-last"],
                         ns=[6400, 12800, 25600, 51200, 102400, 204800],
                         extra_ns={"ntp": [409600, 819200, 1638400], "ntp-last": [409600, 819200, 1638400],
                                   "text-jepa": [1600, 3200]},
                         batch_size=64, n_train=12000, image_steps=4800, image_batch=64),
    # machinery tests of the lab mode (seconds)
    "quick-lab": ScalingConfig(name="quick-lab", lab=True, ns=[64, 128, 256], seeds=[0, 1], batch_size=16,
                               n_train=200, n_test=60, image_steps=20, image_batch=16, k=5),
    # longer curves (a GPU, or an hour of CPU)
    "full": ScalingConfig(name="full", ns=[1024, 2048, 4096, 8192, 16384, 32768, 65536], seeds=[0, 1, 2],
                          batch_size=64, n_train=20000, n_test=500, image_steps=2000),
}


# --------------------------------------------------------------------------------------------- the law
def power_law(n, a_inf, b, c):
    """a(n) = a_inf - b * n^-c."""
    return a_inf - b * np.power(np.asarray(n, np.float64), -c)


def fit_power_law(ns, ys, sigma=None, a_max: float = 1.0) -> dict:
    """Least-squares fit of a(n) = a_inf - b n^-c (scipy.optimize.curve_fit, bounded: 0 <= a_inf <= a_max,
    b >= 0, 0.01 <= c <= 3; a_max = 1 because alignment scores are at most 1).

    n is rescaled by its smallest value inside the fit, so b refers to n_min and the problem stays well
    conditioned; the returned ``b`` is converted back to the original n.

    Parameters
    ----------
    ns : (M,) sample counts; ys : (M,) alignments (repeated n allowed, e.g. one point per seed).
    sigma : optional (M,) standard deviations (curve_fit's ``sigma``).

    Returns
    -------
    dict(a_inf, b, c, rmse) ; raises ValueError with fewer than 3 distinct n.
    """
    from scipy.optimize import curve_fit

    ns = np.asarray(ns, np.float64)
    ys = np.asarray(ys, np.float64)
    if len(np.unique(ns)) < 3:
        raise ValueError(f"need >= 3 distinct sample counts to fit 3 parameters, got {sorted(set(ns.tolist()))}")
    n0 = ns.min()
    x = ns / n0
    top = float(ys.max())
    p0 = (min(a_max, top + 0.05), max(1e-3, top + 0.05 - float(ys[np.argmin(ns)])), 0.5)
    (a, bs, c), _ = curve_fit(power_law, x, ys, p0=p0, sigma=sigma, bounds=([0.0, 0.0, 0.01], [a_max, np.inf, 3.0]),
                              maxfev=20000)
    rmse = float(np.sqrt(np.mean((power_law(x, a, bs, c) - ys) ** 2)))
    return {"a_inf": float(a), "b": float(bs * n0 ** c), "c": float(c), "rmse": rmse}


def logistic_law(n, n50, c, lo, hi):
    """a(n) = lo + (hi - lo) / (1 + (n50 / n)^c): a logistic in log n from ``lo`` (few samples) to ``hi``
    (many), half way at ``n50``, with slope ``c`` in log n."""
    x = np.log(np.asarray(n, np.float64)) - math.log(n50)
    return lo + (hi - lo) / (1.0 + np.exp(-c * x))


def fit_logistic_law(ns, ys, lo: float, hi: float, sigma=None) -> dict:
    """Least-squares fit of ``logistic_law`` with its floor ``lo`` and ceiling ``hi`` given, not fitted:
    two free parameters, n50 and c (scipy.optimize.curve_fit, bounded: n50 within e^10 of the measured
    range, 0.05 <= c <= 10).

    The floor and ceiling are what the world fixes before any run: chance mutual k-NN (an encoder that
    knows nothing) and the score of a perfect representation (``scenelab.mutual_knn_ceiling``). Between
    them the curve starts slowly, rises and flattens under the ceiling: the S in log n that the saturating
    power law (``power_law``, no floor) cannot follow.

    Returns dict(n50, c, lo, hi, rmse); raises ValueError with fewer than 2 distinct n or lo >= hi.
    """
    import warnings

    from scipy.optimize import OptimizeWarning, curve_fit

    ns = np.asarray(ns, np.float64)
    ys = np.asarray(ys, np.float64)
    if len(np.unique(ns)) < 2:
        raise ValueError(f"need >= 2 distinct sample counts to fit 2 parameters, got {sorted(set(ns.tolist()))}")
    if not lo < hi:
        raise ValueError(f"the law's floor ({lo}) must be below its ceiling ({hi})")
    ln = np.log(ns)

    def f(ln_n, l50, c):
        return lo + (hi - lo) / (1.0 + np.exp(-c * (ln_n - l50)))

    # start where the measured points cross half way (or the middle of the range)
    half = lo + 0.5 * (hi - lo)
    l0 = float(ln[np.argmin(np.abs(ys - half))]) if ys.max() > half > ys.min() else float(np.median(ln))
    with warnings.catch_warnings():    # a flat curve leaves the covariance undefined: only the fit is used
        warnings.simplefilter("ignore", OptimizeWarning)
        (l50, c), _ = curve_fit(f, ln, ys, p0=(l0, 1.0), sigma=sigma, maxfev=20000,
                                bounds=([ln.min() - 10.0, 0.05], [ln.max() + 10.0, 10.0]))
    rmse = float(np.sqrt(np.mean((f(ln, l50, c) - ys) ** 2)))
    return {"n50": float(math.exp(l50)), "c": float(c), "lo": float(lo), "hi": float(hi), "rmse": rmse}


def samples_for_logistic(alignment: float, fit: dict) -> float:
    """Inverse of ``logistic_law``: the n at which ``fit`` reaches ``alignment`` (0 at or below its floor,
    inf at or above its ceiling)."""
    lo, hi = fit["lo"], fit["hi"]
    if alignment <= lo:
        return 0.0
    if alignment >= hi:
        return math.inf
    return float(fit["n50"] * ((alignment - lo) / (hi - alignment)) ** (1.0 / fit["c"]))


def samples_for(alignment: float, fit: dict) -> float:
    """Inverse of the law: the n at which ``fit`` reaches ``alignment`` (inf if it never does)."""
    gap = fit["a_inf"] - alignment
    if gap <= 0:
        return math.inf
    return float((fit["b"] / gap) ** (1.0 / fit["c"]))


# ---------------------------------------------------------------------------------------------- runs
def _world(cfg: ScalingConfig):
    from captioner.jepa import scenelab as S
    from captioner.jepa.views import ViewsCorpus

    lab = lab_config(cfg)    # its world: captions and renders per scene, augmentations, held-out pairs
    scenes = S.sample_scenes(cfg.n_train, seed=cfg.world_seed)
    corpus = ViewsCorpus("scenelab", [S.captions(sc, lab.n_captions, seed=cfg.world_seed * 7919 + i)
                                      for i, sc in enumerate(scenes)], [sc.key() for sc in scenes])
    return scenes, corpus, lab


def lab_config(cfg: ScalingConfig, batch_size: int | None = None):
    """The scene lab's LabConfig that a ``cfg.lab`` run trains with (the lab's defaults, this config's
    world, sizes and learning rate)."""
    from captioner.jepa import scenelab as S

    return S.LabConfig(preset=cfg.model_preset, n_train=cfg.n_train, n_test=cfg.n_test,
                       batch_size=batch_size or cfg.batch_size, lr=cfg.lr, embed_dim=cfg.embed_dim,
                       image_steps=cfg.image_steps, k=cfg.k, seed=cfg.world_seed)


def _image_side(cfg: ScalingConfig, out: Path, scenes, lab, test_ims, progress: bool) -> np.ndarray:
    """The image JEPA (trained once, reused) embedding of the held-out renders: (n_test, E)."""
    from captioner.jepa import scenelab as S
    from captioner.jepa import views as V
    from captioner.jepa.train import resolve_config

    path = out / "image_test.npy"
    if path.exists():
        return np.load(path)
    if cfg.lab:
        lab_img = lab_config(cfg, batch_size=cfg.image_batch)
    else:   # the preset's objective, as the cpu preset's runs were measured
        lab_img = S.LabConfig(preset=cfg.model_preset, batch_size=cfg.image_batch, embed_dim=cfg.embed_dim,
                              seed=cfg.world_seed, objective={})
    base = resolve_config("image-jepa", cfg.model_preset, image=lab_img.image or None)
    aug = S.augment_config(lab)
    data = V.ImageViews(S.render_array(scenes, lab.n_renders, base.image.image_size, seed=cfg.world_seed), aug)
    model, _, _ = S._train_and_load("image-jepa", lab_img, data, out / "image-jepa", progress, cfg.image_steps,
                                    cfg.world_seed, augment=asdict(aug))
    X = S.embed_images(model, test_ims)
    np.save(path, X)
    return X


# ------------------------------------------------------------------------------------------- workers
# which runs a config plans (methods, sample counts, seeds) does not change how any one run is trained: a folder's
# runs serve every config that differs from its own in these only
_PLAN_FIELDS = ("methods", "ns", "extra_ns", "seeds")


def compatible(old: dict, new: dict) -> bool:
    """True when the runs in a folder written under config ``old`` are valid runs of config ``new``: the
    two agree on everything but the plan (``_PLAN_FIELDS``), so a run (method, n, seed) is trained and
    measured the same way under both. Adding sample counts or seeds to a preset then reuses every run
    done."""
    def strip(d):
        return {k: v for k, v in d.items() if k not in _PLAN_FIELDS}
    return strip(old) == strip(new)


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(path: Path, fresh_s: float = 60.0) -> bool:
    """Take ``path`` (a claim file holding this process's pid) unless a live process holds it.

    Several workers on one machine share a results folder this way: each run (and the image side) is
    trained by the worker that claims it. A claim whose process is gone (killed) is stale and taken
    over; an empty one younger than ``fresh_s`` seconds is a claim being written. True: ours now.
    """
    import os

    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                text, age = path.read_text().strip(), time.time() - path.stat().st_mtime
            except FileNotFoundError:
                continue                      # released meanwhile: try again
            if text.isdigit():
                pid = int(text)
                if pid == os.getpid():
                    return True
                if _alive(pid):
                    return False
            elif age < fresh_s:
                return False
            path.unlink(missing_ok=True)     # stale: its process is gone
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


def _worker(cfg_dict: dict, out: str, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    run_scaling(ScalingConfig(**cfg_dict), out=out, progress=False, runs_only=True)


# how each method's model is trained (its kind) and its text embedded: "ntp-last" is the next-token LM of
# "ntp" (same training, same seed: the same model) read at its last token instead of its mean
METHODS = {"text-jepa": ("text-jepa", "mean"), "ntp": ("ntp", "mean"), "ntp-last": ("ntp", "last")}


def siblings(method: str) -> list[str]:
    """The methods whose runs train the same model as ``method`` (one training serves them all)."""
    return [m for m in METHODS if METHODS[m][0] == METHODS[method][0]]


def run_one(cfg: ScalingConfig, method: str, n: int, seed: int, corpus, test_caps, Y, out: Path,
            progress: bool = False, data=None, also: tuple = ()) -> dict:
    """Train ``method`` on n samples (n / batch steps) with ``seed``; mutual k-NN of its held-out caption
    embeddings with the image side ``Y`` (an array, or a function returning it, called after training).
    ``also``: sibling methods (``siblings``) measured on the same trained model; their results come
    under ``"also"``. The checkpoint is deleted once measured; the result is kept."""
    from captioner.errors import CaptionerError
    from captioner.jepa import scenelab as S
    from captioner.jepa import views as V
    from captioner.jepa.model import build_model
    from captioner.jepa.train import load_checkpoint, resolve_config, train

    if method not in METHODS:
        raise CaptionerError(f"unknown scaling method {method!r}; choose from {', '.join(METHODS)}")
    kind, pool = METHODS[method]
    steps = max(1, n // cfg.batch_size)
    tc = resolve_config(kind, cfg.model_preset, corpus="scenelab", steps=steps, batch_size=cfg.batch_size,
                        seed=seed, lr=cfg.lr, save_every=max(1, steps // 4), warmup=max(1, steps // 10),
                        text={"embed_dim": cfg.embed_dim})
    if data is None:
        data = (V.TokenViews(corpus, tc.text.max_len, warn=False) if kind == "text-jepa"
                else V.TokenDocuments(corpus, tc.text.max_len, seed=seed))
    # the run folder is named by the model, not the method: siblings resume one another's kill
    run_dir = out / "tmp" / f"{kind}-n{n}-s{seed}"
    t0 = time.time()
    if cfg.lab:     # exactly as the scene lab trains its text side
        model, tc, summary = S._train_and_load(kind, lab_config(cfg), data, run_dir, progress, steps, seed)
    else:
        summary = train(tc, run_dir, resume=True, data=data, progress=progress)
        ck = load_checkpoint(run_dir)
        model = build_model(kind, tc.text, obj=tc.objective)
        model.load_state_dict(ck["model"])
    if callable(Y):     # the image side, trained (or awaited from another worker) once a run needs it
        Y = Y()
    seconds = round(time.time() - t0, 2)

    def result(m):
        X = S.embed_texts(model, kind, test_caps, tc.text.max_len, pool=METHODS[m][1])
        return {"method": m, "n": int(n), "seed": int(seed), "steps": steps, "batch_size": cfg.batch_size,
                "mutual_knn": S.mutual_knn(X, Y, cfg.k), "procrustes_residual": S.procrustes_residual(X, Y),
                "last_loss": summary.get("last_loss"), "seconds": seconds}

    res = result(method)
    res["also"] = [result(m) for m in also if m != method and m in siblings(method)]
    shutil.rmtree(run_dir, ignore_errors=True)
    return res


def _holdout(fit, law, xs, ys, by_n) -> dict:
    """Fit on every n but the largest with ``fit(xs, ys)``, predict the largest with ``law(n, **params)``
    and set the error beside the seed spread there."""
    n_max = max(xs)
    small = [(x, y) for x, y in zip(xs, ys) if x < n_max]
    f = fit([x for x, _ in small], [y for _, y in small])
    pred = float(law(n_max, f))
    meas = by_n[n_max]
    spread = float(np.std(meas, ddof=1)) if len(meas) > 1 else float("nan")
    err = abs(pred - float(np.mean(meas)))
    return {"fit_on": sorted({x for x, _ in small}), "n": n_max, "fit": f, "predicted": pred,
            "measured": float(np.mean(meas)), "abs_error": err, "seed_std": spread,
            "error_over_std": err / spread if spread > 0 else None}


def _fit_and_holdout(fit, law, xs, ys, by_n) -> dict:
    """{"fit_all": ``fit`` on every point, "holdout": ``_holdout``}; a fit that fails gives {"error": ...}."""
    res = {}
    for key, make in (("fit_all", lambda: fit(xs, ys)), ("holdout", lambda: _holdout(fit, law, xs, ys, by_n))):
        try:
            res[key] = make()
        except (ValueError, RuntimeError) as e:
            res[key] = {"error": str(e)}
    return res


def analyse(cfg: ScalingConfig, runs: list[dict], ceiling: float | None = None) -> dict:
    """Fits, held-out predictions, seed spreads and the NTP / JEPA sample ratio from the run results.

    Two laws per method: the saturating power law (``fit_all`` / ``holdout``) and, when the world's
    mutual k-NN ``ceiling`` is given, the logistic in log n from chance to that ceiling (``logistic``:
    its own ``fit_all`` / ``holdout``)."""
    out: dict = {"methods": {}}
    chance = cfg.k / (cfg.n_test - 1)
    for m in cfg.methods:
        rs = [r for r in runs if r["method"] == m]
        ns = sorted({r["n"] for r in rs})
        by_n = {n: [r["mutual_knn"] for r in rs if r["n"] == n] for n in ns}
        table = [{"n": n, "mean": float(np.mean(v)), "std": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0,
                  "min": float(np.min(v)), "seeds": len(v)} for n, v in by_n.items()]
        entry: dict = {"points": table}
        xs = [r["n"] for r in rs]
        ys = [r["mutual_knn"] for r in rs]
        entry.update(_fit_and_holdout(fit_power_law, lambda n, f: power_law(n, f["a_inf"], f["b"], f["c"]),
                                      xs, ys, by_n))
        if ceiling is not None:
            entry["logistic"] = _fit_and_holdout(
                lambda a, b: fit_logistic_law(a, b, chance, ceiling),
                lambda n, f: logistic_law(n, f["n50"], f["c"], f["lo"], f["hi"]), xs, ys, by_n)
        out["methods"][m] = entry
    good = "text-jepa"
    out["baselines"] = {}
    for bad in METHODS:     # every baseline of the registry that this config measured
        if bad != good and good in out["methods"] and bad in out["methods"]:
            out["baselines"][bad] = _ratios(out["methods"][good], out["methods"][bad])
    if "ntp" in out["baselines"]:       # the issue's baseline (mean-pooled NTP), at the top level too
        out.update(out["baselines"]["ntp"])
    return out


def interpolate_n(points: list[dict], alignment: float) -> float | None:
    """The n at which the measured means first reach ``alignment``, interpolated linearly in log n
    between the two points around it (no law); None outside the measured range."""
    pts = sorted(points, key=lambda p: p["n"])
    for p, q in zip(pts, pts[1:]):
        if p["mean"] < alignment <= q["mean"]:
            t = (alignment - p["mean"]) / (q["mean"] - p["mean"])
            return float(math.exp(math.log(p["n"]) + t * (math.log(q["n"]) - math.log(p["n"]))))
    if pts and pts[0]["mean"] == alignment:
        return float(pts[0]["n"])
    return None


def _ratios(g: dict, b: dict) -> dict:
    """The ratio bound and, where the baseline learned, the sample ratio at equal alignment, from the
    JEPA's analysis entry ``g`` and the baseline's ``b`` (see ``analyse``)."""
    out: dict = {"ratio_bound": ratio_bound(g["points"], b["points"])}
    fg, fb = g.get("fit_all", {}), b.get("fit_all", {})
    pts_b = b["points"]
    if not ("a_inf" in fg and "a_inf" in fb and pts_b):
        return out
    best = max(pts_b, key=lambda p: p["mean"])   # the best alignment the baseline reached, and where
    target, n_bad = best["mean"], best["n"]
    n_good = samples_for(target, fg)
    n_min = g["points"][0]["n"]
    # the baseline must have learned something for "equal alignment" to mean anything: at its best n
    # every seed has to clear its smallest-n point's band (mean + 2 seed std); else no finite ratio.
    # The band is the floor's own spread: seeds that take off at different budgets (a spread at the
    # best point) have all learned, where a bump that one seed stays under is noise
    learned = learned_above_floor(pts_b, best)
    ratio = n_bad / n_good if n_good > 0 and math.isfinite(n_good) and learned else None
    r = {"alignment": target, "n_ntp": n_bad, "n_jepa": n_good, "ratio_ntp_over_jepa": ratio,
         "ntp_learned": learned, "jepa_extrapolated": bool(n_good < n_min),
         "ntp_a_inf": fb["a_inf"], "jepa_a_inf": fg["a_inf"]}
    lg = g.get("logistic", {}).get("fit_all", {})
    if "n50" in lg:     # the same ratio through the JEPA's logistic law
        nl = samples_for_logistic(target, lg)
        r["logistic"] = {"n_jepa": nl, "jepa_extrapolated": bool(nl < n_min),
                         "ratio_ntp_over_jepa": n_bad / nl if learned and 0 < nl < math.inf else None}
    # and with no law: where the JEPA's measured means cross the target
    ni = interpolate_n(g["points"], target)
    r["interpolated"] = {"n_jepa": ni, "ratio_ntp_over_jepa": n_bad / ni if learned and ni else None}
    # the same at every baseline point past its floor band: the ratio as a function of the alignment level
    curve = []
    for p in sorted(pts_b, key=lambda p: p["n"]):
        nj = interpolate_n(g["points"], p["mean"]) if learned_above_floor(pts_b, p) else None
        if nj:
            curve.append({"n_ntp": p["n"], "alignment": p["mean"], "n_jepa": nj, "ratio": p["n"] / nj})
    r["interpolated"]["by_n"] = curve
    # the other way round too: samples the baseline's fitted law needs for the JEPA's best alignment
    tg = g["points"][-1]
    nb = samples_for(tg["mean"], fb)
    r["ntp_samples_for_jepa_best"] = {"alignment": tg["mean"], "n_jepa": tg["n"], "n_ntp": nb,
                                      "ratio": nb / tg["n"] if math.isfinite(nb) else None}
    out["ratio"] = r
    return out


def learned_above_floor(points: list[dict], best: dict) -> bool:
    """Whether a method learned alignment by its ``best`` point: every seed there (its ``min``) is above
    the smallest-n point's mean + 2 x that point's seed std. ``points``: per-n {"n", "mean", "std",
    "min"} (``min`` defaults to the mean)."""
    first = min(points, key=lambda p: p["n"])
    if best is first:
        return False
    band = first["mean"] + 2 * max(first["std"], 1e-12)
    return bool(best.get("min", best["mean"]) > band)


def ratio_bound(good: list[dict], bad: list[dict]) -> dict | None:
    """A model-free lower bound on the sample ratio, from the measured points alone (no fit).

    ``good`` / ``bad``: the per-n points ({"n", "mean", "std"}) of the JEPA and of NTP. The alignment
    level is the highest NTP mean plus twice the largest seed std of either method; the first JEPA n
    whose mean clears it is ``n_good``. NTP stayed below that level at every n up to its largest,
    ``n_bad``, so NTP needs more than ``n_bad`` samples where the JEPA needed ``n_good``: ratio >
    n_bad / n_good. None when no JEPA point clears the level.
    """
    if not good or not bad:
        return None
    noise = max(p["std"] for p in good + bad)
    level = max(p["mean"] for p in bad) + 2 * noise
    above = [p for p in sorted(good, key=lambda p: p["n"]) if p["mean"] > level]
    if not above:
        return None
    n_bad = max(p["n"] for p in bad)
    return {"level": float(level), "n_jepa": int(above[0]["n"]), "jepa_mean": float(above[0]["mean"]),
            "n_ntp_max": int(n_bad), "ratio_greater_than": n_bad / above[0]["n"]}


def plot(cfg: ScalingConfig, runs: list[dict], analysis: dict, path: Path) -> Path:
    """alignment vs samples seen (log x): seeds as dots, means, each law fitted on the smaller n (power
    law dashed, logistic solid) and its held-out prediction (open circle / square)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    ceiling = None
    colours = {"text-jepa": "tab:blue", "ntp": "tab:red", "ntp-last": "tab:orange"}
    labels = {"text-jepa": "text JEPA (good views)", "ntp": "next-token LM (bad views), mean",
              "ntp-last": "next-token LM (bad views), last token"}
    for m, entry in analysis["methods"].items():
        col = colours.get(m, "k")
        xs = [r["n"] for r in runs if r["method"] == m]
        ys = [r["mutual_knn"] for r in runs if r["method"] == m]
        if not xs:
            continue
        ax.scatter(xs, ys, s=10, color=col, alpha=0.4)
        pts = entry["points"]
        ax.errorbar([p["n"] for p in pts], [p["mean"] for p in pts], yerr=[p["std"] for p in pts], fmt="o",
                    color=col, label=labels.get(m, m), capsize=3)
        grid = np.geomspace(min(xs), max(xs) * 2, 100)
        h = entry.get("holdout", {})
        if "fit" in h:
            f = h["fit"]
            ax.plot(grid, power_law(grid, f["a_inf"], f["b"], f["c"]), "--", color=col, lw=1)
            ax.scatter([h["n"]], [h["predicted"]], s=80, facecolors="none", edgecolors=col, zorder=5)
        h = entry.get("logistic", {}).get("holdout", {})
        if "fit" in h:
            f = h["fit"]
            ceiling = f["hi"]
            ax.plot(grid, logistic_law(grid, f["n50"], f["c"], f["lo"], f["hi"]), "-", color=col, lw=1, alpha=0.7)
            ax.scatter([h["n"]], [h["predicted"]], s=80, marker="s", facecolors="none", edgecolors=col, zorder=5)
    ax.axhline(cfg.k / (cfg.n_test - 1), color="grey", lw=0.8, ls=":", label="chance")
    if ceiling is not None:
        top = max(r["mutual_knn"] for r in runs)
        if top > 0.4 * ceiling:
            ax.axhline(ceiling, color="grey", lw=0.8, ls="-.", label="ceiling (perfect representation)")
        else:   # far above every point: named, not drawn, so the points keep the plot's height
            ax.plot([], [], " ", label=f"ceiling {ceiling:.3f} (perfect representation; above the plot)")
    # legend entries for the two laws (fitted without the largest n; open markers: their predictions)
    ax.plot([], [], "k--", lw=1, label="power law, largest n held out (o: its prediction)")
    if ceiling is not None:
        ax.plot([], [], "k-", lw=1, alpha=0.7, label="logistic law, largest n held out (\u25a1: its prediction)")
    ax.set_xscale("log")
    ticks = sorted({r["n"] for r in runs})
    ax.set_xticks(ticks, [f"{t / 1000:g}k" if t >= 10_000 else str(t) for t in ticks], fontsize=8)
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("training samples seen")
    ax.set_ylabel(f"mutual {cfg.k}-NN with the image JEPA")
    ax.set_title(f"scene lab alignment scaling ({cfg.name})")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def run_scaling(preset: str | ScalingConfig = "cpu", out=None, force: bool = False, progress: bool = True,
                workers: int = 1, runs_only: bool = False, poll_s: float = 5.0) -> dict:
    """All runs of ``preset`` (skipping those whose result exists unless ``force``), then the analysis,
    the plot, ``results.json`` and ``results.md`` in ``out`` (default ``<home>/runs/scaling-<preset>``).

    ``workers`` > 1 starts that many - 1 more processes on this machine (torch threads shared out among
    them); every process takes the next run nobody has claimed (``claim``), largest first, and this one
    waits for the others' results before the analysis. Another ``captioner scaling`` on the same folder
    joins in the same way; a killed worker's run is taken over (and resumed from its checkpoint).
    ``runs_only``: only the runs (a worker), returning {"runs": [...]}.
    """
    import multiprocessing
    import os

    from tqdm.auto import tqdm

    from captioner.errors import CaptionerError
    from captioner.jepa import scenelab as S
    from captioner.jepa import views as V
    from captioner.jepa.train import resolve_config
    from captioner.paths import atomic_write_json, subdir

    if isinstance(preset, ScalingConfig):
        cfg = preset
    elif preset in PRESETS:
        cfg = PRESETS[preset]
    else:
        raise CaptionerError(f"unknown scaling preset {preset!r}; choose one of {', '.join(PRESETS)}")
    if workers < 1:
        raise CaptionerError(f"scaling workers must be >= 1, not {workers}")
    out = Path(out) if out else subdir("runs") / f"scaling-{cfg.name}"
    (out / "runs").mkdir(parents=True, exist_ok=True)
    cfg_path = out / "config.json"
    if cfg_path.exists() and not force:
        old = json.loads(cfg_path.read_text())
        if not compatible(old, asdict(cfg)):
            raise CaptionerError(f"{out} holds runs of another scaling config; pass --force or another --out")
    atomic_write_json(cfg_path, asdict(cfg))
    t0 = time.time()
    scenes, corpus, lab = _world(cfg)
    base = resolve_config("text-jepa", cfg.model_preset)
    test_scenes, test_ims, test_caps = S.test_pairs(lab, base.image.image_size)
    if force:
        for p in (out / "runs").glob("*.json"):
            p.unlink()
        (out / "image_test.npy").unlink(missing_ok=True)

    def image_side():
        path = out / "image_test.npy"
        while not path.exists():
            if claim(out / "image.claim"):
                try:
                    return _image_side(cfg, out, scenes, lab, test_ims, progress and workers == 1)
                finally:
                    (out / "image.claim").unlink(missing_ok=True)
            time.sleep(poll_s)          # another worker trains it
        return np.load(path)

    procs, old_threads = [], None
    if workers > 1:
        import torch

        old_threads = torch.get_num_threads()
        threads = max(1, (os.cpu_count() or 1) // workers)
        torch.set_num_threads(threads)
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=_worker, args=(asdict(cfg), str(out), threads), daemon=True)
                 for _ in range(workers - 1)]
        for pr in procs:
            pr.start()

    def result_path(m, n, s):
        return out / "runs" / f"{m}-n{n}-s{s}.json"

    order = {m: i for i, m in enumerate(cfg.methods)}
    todo = [(m, n, s) for m in cfg.methods for n in sorted({*cfg.ns, *cfg.extra_ns.get(m, [])}) for s in cfg.seeds]
    # largest first: the workers finish together
    pending = sorted(todo, key=lambda t: (-t[1], order[t[0]], t[2]))
    done: dict = {}
    sources: dict = {}

    def source(m, s):
        # tokenised once per method (and per seed for the documents, whose sentence order is seeded)
        kind = METHODS[m][0]
        key = (kind, s if kind == "ntp" else None)
        if key not in sources:
            sources[key] = (V.TokenViews(corpus, base.text.max_len, warn=False) if kind == "text-jepa"
                            else V.TokenDocuments(corpus, base.text.max_len, seed=s))
        return sources[key]

    bar = tqdm(total=len(todo), desc=f"scaling {cfg.name}", unit="run", disable=not progress)
    try:
        while pending:
            took = False
            for t in list(pending):
                m, n, s = t
                p = result_path(m, n, s)
                if not p.exists():
                    # claimed per model, not per method: siblings share one training and its run folder
                    c = out / "runs" / f"{METHODS[m][0]}-n{n}-s{s}.claim"
                    if not claim(c):
                        continue            # another worker's
                    try:
                        if not p.exists():
                            bar.set_postfix(run=f"{m} n={n} seed={s}")
                            # planned siblings not yet measured are measured on this training too
                            sib = tuple(x for x in siblings(m) if x != m and x in cfg.methods
                                        and not result_path(x, n, s).exists())
                            r = run_one(cfg, m, n, s, corpus, test_caps, image_side, out, data=source(m, s),
                                        also=sib)
                            for other in r.pop("also"):
                                atomic_write_json(result_path(other["method"], n, s), other)
                            atomic_write_json(p, r)
                    finally:
                        c.unlink(missing_ok=True)
                    took = True
                done[t] = json.loads(p.read_text())
                pending.remove(t)
                bar.update(1)
            if pending and not took:
                time.sleep(poll_s)          # the rest are other workers' (a dead one's claim is taken over)
    finally:
        bar.close()
        for pr in procs:
            pr.join(timeout=None if not pending else 0)
            if pr.is_alive():
                pr.terminate()
        if old_threads is not None:
            import torch

            torch.set_num_threads(old_threads)
    runs = [done[t] for t in todo]
    if runs_only:
        return {"runs": runs}
    # what a perfect representation scores on these held-out scenes: the logistic law's ceiling
    ceiling = S.mutual_knn_ceiling(S.latent_features(test_scenes), cfg.k, seed=lab.seed)
    analysis = analyse(cfg, runs, ceiling=ceiling)
    png = plot(cfg, runs, analysis, out / "scaling.png")
    res = {"config": asdict(cfg), "runs": runs, **analysis, "plot": str(png), "out": str(out),
           "chance_mutual_knn": cfg.k / (cfg.n_test - 1), "mutual_knn_ceiling": ceiling, "seconds_this_call": round(time.time() - t0, 1)}
    atomic_write_json(out / "results.json", res)
    (out / "results.md").write_text(format_table(res) + "\n")
    return res


def _f(x, nd=3):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-" if x is None else str(x)
    return f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def _ratio_lines(method: str, r: dict | None, b: dict | None) -> list[str]:
    """The equal-alignment ratio and the bound of one baseline (``method``: ntp or ntp-last), as text."""
    name = {"ntp": "NTP", "ntp-last": "NTP (last token)"}.get(method, method)
    lines: list[str] = []
    if r:
        lines.append("")
        if not r.get("ntp_learned", True):
            lines.append(f"{name}: at its best alignment ({r['alignment']:.3f} at n={r['n_ntp']}) not every seed is "
                         "above its smallest-n point's mean + 2 seed std: it learned no measurable alignment "
                         "in this range, so there is no equal-alignment sample ratio (a larger budget is needed).")
        else:
            lines.append(f"{name}: equal alignment {r['alignment']:.3f} (its best, reached at n={r['n_ntp']}): the JEPA "
                         f"power law reaches it at n={_f(r['n_jepa'], 0)}"
                         + (" (extrapolated below the smallest n)" if r["jepa_extrapolated"] else "")
                         + f" -> sample ratio {name} / JEPA = {_f(r['ratio_ntp_over_jepa'], 1)}x.")
            lr = r.get("logistic")
            if lr:
                lines.append(f"Through the JEPA's logistic law: n={_f(lr['n_jepa'], 0)}"
                             + (" (extrapolated below the smallest n)" if lr["jepa_extrapolated"] else "")
                             + f" -> sample ratio {name} / JEPA = {_f(lr['ratio_ntp_over_jepa'], 1)}x.")
            li = r.get("interpolated")
            if li:
                lines.append("Interpolated between the JEPA's measured points (no law): "
                             + (f"n={li['n_jepa']:.0f} -> sample ratio {name} / JEPA = {li['ratio_ntp_over_jepa']:.1f}x."
                                if li["n_jepa"] else "outside the JEPA's measured range."))
                if len(li.get("by_n", [])) > 1:
                    lines.append(f"The same at each {name} point past its floor band: " + "; ".join(
                        f"n={c['n_ntp']} ({c['alignment']:.3f}): {c['ratio']:.0f}x" for c in li["by_n"]) + ".")
        o = r["ntp_samples_for_jepa_best"]
        lines.append(f"JEPA's best {o['alignment']:.3f} at n={o['n_jepa']}: the {name} power law "
                     + (f"needs n={o['n_ntp']:.3g} ({o['ratio']:.3g}x)." if o["ratio"] else
                        f"never reaches it (a_inf = {r['ntp_a_inf']:.3f})."))
    if b:
        lines.append(f"Bound from the measured points (no fit): the JEPA clears {b['level']:.3f} ({name}'s best + 2 x "
                     f"the largest seed std) at n={b['n_jepa']} ({b['jepa_mean']:.3f}); {name} stays below it up to "
                     f"n={b['n_ntp_max']} -> sample ratio {name} / JEPA > {b['ratio_greater_than']:.0f}x there.")
    return lines


def format_table(res: dict) -> str:
    """Markdown: the mean +- std table per (method, n), the fits, held-out predictions and the ratio."""
    cfg = res["config"]
    methods = list(res["methods"])
    ns = sorted({p["n"] for m in methods for p in res["methods"][m]["points"]})
    lines = [f"Mutual {cfg['k']}-NN with the image JEPA on {cfg['n_test']} held-out scene-lab pairs "
             f"(mean +- std over {len(cfg['seeds'])} seeds; chance {res['chance_mutual_knn']:.3f}).", "",
             "| samples seen | " + " | ".join(methods) + " |", "| ---: | " + " | ".join("---:" for _ in methods) + " |"]
    for n in ns:
        cells = []
        for m in methods:
            p = [q for q in res["methods"][m]["points"] if q["n"] == n]
            cells.append(f"{p[0]['mean']:.3f} +- {p[0]['std']:.3f}" if p else "-")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += ["", "| method | law | fit (all n) | held-out n | predicted | measured | abs error | seed std | error / std |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for m in methods:
        e = res["methods"][m]
        laws = [("power", e.get("fit_all", {}), e.get("holdout", {}))]
        if "logistic" in e:
            laws.append(("logistic", e["logistic"].get("fit_all", {}), e["logistic"].get("holdout", {})))
        for law, fa, h in laws:
            if "a_inf" in fa:
                fit = f"a_inf {fa['a_inf']:.3f}, b {fa['b']:.3g}, c {fa['c']:.3f}"
            elif "n50" in fa:
                fit = f"n50 {fa['n50']:.3g}, c {fa['c']:.3f}"
            else:
                fit = fa.get("error", "-")
            if "predicted" in h:
                lines.append(f"| {m} | {law} | {fit} | {h['n']} | {h['predicted']:.3f} | {h['measured']:.3f} | "
                             f"{h['abs_error']:.3f} | {_f(h['seed_std'])} | {_f(h['error_over_std'], 1)} |")
            else:
                lines.append(f"| {m} | {law} | {fit} | - | - | - | - | - | - |")
    lines += ["", "Laws: power a(n) = a_inf - b n^-c; logistic a(n) = lo + (hi - lo) / (1 + (n50 / n)^c) with lo = "
              f"chance ({res['chance_mutual_knn']:.3f}) and hi = the ceiling "
              + (f"({res['mutual_knn_ceiling']:.3f}, the latents vs a rotation of them + 1% noise)"
                 if res.get("mutual_knn_ceiling") is not None else "(not given: no logistic fit)")
              + " fixed, not fitted. Held out: each law fitted without the largest n, then asked for it."]
    for name, base in (res.get("baselines") or {"ntp": res}).items():
        lines += _ratio_lines(name, base.get("ratio"), base.get("ratio_bound"))
    lines.append(f"\nPlot: {res.get('plot', '-')}")
    return "\n".join(lines)
