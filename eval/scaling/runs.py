r"""The alignment scaling law: how many samples a text encoder needs to align with an image encoder.

For each method (the text JEPA with good views, the next-token LM with bad views), sample count n
(samples seen in training = steps x batch) and seed, train a run in the scene lab, embed held-out
captions, and measure mutual k-NN against the image JEPA's embeddings of the matching renders. Then fit

.. math:: a(n) = a_\infty - b \, n^{-c}

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
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from eval.scaling.config import METHODS, PRESETS, ScalingConfig, compatible, siblings
from eval.scaling.laws import analyse
from eval.scaling.plot import plot
from eval.scaling.queue import claim
from eval.scaling.report import format_table


def _world(cfg: ScalingConfig):
    from captioner.jepa.views import ViewsCorpus
    from captioner.world import scenes as W

    lab = lab_config(cfg)    # its world: captions and renders per scene, augmentations, held-out pairs
    scenes = W.sample_scenes(cfg.n_train, seed=cfg.world_seed)
    corpus = ViewsCorpus("scenelab", [W.captions(sc, lab.n_captions, seed=cfg.world_seed * 7919 + i)
                                      for i, sc in enumerate(scenes)], [sc.key() for sc in scenes])
    return scenes, corpus, lab


def lab_config(cfg: ScalingConfig, batch_size: int | None = None):
    """The scene lab's LabConfig that a ``cfg.lab`` run trains with (the lab's defaults, this config's
    world, sizes and learning rate)."""
    from eval.scenelab import lab as S

    return S.LabConfig(preset=cfg.model_preset, n_train=cfg.n_train, n_test=cfg.n_test,
                       batch_size=batch_size or cfg.batch_size, lr=cfg.lr, embed_dim=cfg.embed_dim,
                       image_steps=cfg.image_steps, k=cfg.k, seed=cfg.world_seed)


def _image_side(cfg: ScalingConfig, out: Path, scenes, lab, test_ims, progress: bool) -> np.ndarray:
    """The image JEPA (trained once, reused) embedding of the held-out renders: (n_test, E)."""
    from captioner.jepa import embed as E
    from captioner.jepa import views as V
    from captioner.jepa.train import resolve_config
    from captioner.world import scenes as W
    from eval.scenelab import lab as S

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
    data = V.ImageViews(W.render_array(scenes, lab.n_renders, base.image.image_size, seed=cfg.world_seed), aug)
    model, _, _ = S.train_and_load("image-jepa", lab_img, data, out / "image-jepa", progress, cfg.image_steps,
                                    cfg.world_seed, augment=asdict(aug))
    X = E.embed_images(model, test_ims)
    np.save(path, X)
    return X


def _worker(cfg_dict: dict, out: str, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    run_scaling(ScalingConfig(**cfg_dict), out=out, progress=False, runs_only=True)


def run_one(cfg: ScalingConfig, method: str, n: int, seed: int, corpus, test_caps, Y, out: Path,
            progress: bool = False, data=None, also: tuple = ()) -> dict:
    """Train ``method`` on n samples (n / batch steps) with ``seed``; mutual k-NN of its held-out caption
    embeddings with the image side ``Y`` (an array, or a function returning it, called after training).
    ``also``: sibling methods (``siblings``) measured on the same trained model; their results come
    under ``"also"``. The checkpoint is deleted once measured; the result is kept."""
    from captioner.errors import CaptionerError
    from captioner.jepa import embed as E
    from captioner.jepa import views as V
    from captioner.jepa.model import build_model
    from captioner.jepa.train import load_checkpoint, resolve_config, train
    from eval.scenelab import lab as S
    from eval.scenelab import measures as M

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
        model, tc, summary = S.train_and_load(kind, lab_config(cfg), data, run_dir, progress, steps, seed)
    else:
        summary = train(tc, run_dir, resume=True, data=data, progress=progress)
        ck = load_checkpoint(run_dir)
        model = build_model(kind, tc.text, obj=tc.objective)
        model.load_state_dict(ck["model"])
    if callable(Y):     # the image side, trained (or awaited from another worker) once a run needs it
        Y = Y()
    seconds = round(time.time() - t0, 2)

    def result(m):
        X = E.embed_texts(model, kind, test_caps, tc.text.max_len, pool=METHODS[m][1])
        return {"method": m, "n": int(n), "seed": int(seed), "steps": steps, "batch_size": cfg.batch_size,
                "mutual_knn": M.mutual_knn(X, Y, cfg.k), "procrustes_residual": M.procrustes_residual(X, Y),
                "last_loss": summary.get("last_loss"), "seconds": seconds}

    res = result(method)
    res["also"] = [result(m) for m in also if m != method and m in siblings(method)]
    shutil.rmtree(run_dir, ignore_errors=True)
    return res


def _open_folder(preset, out, force: bool, workers: int):
    """(config, folder) of a scaling study: the preset resolved, the folder's config.json checked against it
    (runs of another config refused unless ``force``) and written."""
    from captioner.errors import CaptionerError
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
    return cfg, out


def _start_workers(cfg: ScalingConfig, out: Path, workers: int):
    """``workers`` - 1 more processes on the runs of ``out`` (torch threads shared out among all):
    (processes, this process's former thread count or None)."""
    import multiprocessing
    import os

    if workers <= 1:
        return [], None
    import torch

    old_threads = torch.get_num_threads()
    threads = max(1, (os.cpu_count() or 1) // workers)
    torch.set_num_threads(threads)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(asdict(cfg), str(out), threads), daemon=True)
             for _ in range(workers - 1)]
    for pr in procs:
        pr.start()
    return procs, old_threads


def _stop_workers(procs, unfinished: bool, old_threads) -> None:
    for pr in procs:
        pr.join(timeout=None if not unfinished else 0)
        if pr.is_alive():
            pr.terminate()
    if old_threads is not None:
        import torch

        torch.set_num_threads(old_threads)


def _result_path(out: Path, m: str, n: int, s: int) -> Path:
    return out / "runs" / f"{m}-n{n}-s{s}.json"


def _take_runs(out: Path, train_one, bar, poll_s: float, pending: list) -> dict:
    """Every run of ``pending`` (emptied as they finish): the ones nobody has claimed trained here by
    ``train_one(method, n, seed)`` (which writes their result files), the others awaited. {run: result}."""
    from captioner.paths import atomic_write_json

    done: dict = {}
    while pending:
        took = False
        for t in list(pending):
            m, n, s = t
            p = _result_path(out, m, n, s)
            if not p.exists():
                # claimed per model, not per method: siblings share one training and its run folder
                c = out / "runs" / f"{METHODS[m][0]}-n{n}-s{s}.claim"
                if not claim(c):
                    continue            # another worker's
                try:
                    if not p.exists():
                        bar.set_postfix(run=f"{m} n={n} seed={s}")
                        r = train_one(m, n, s)
                        for other in r.pop("also"):
                            atomic_write_json(_result_path(out, other["method"], n, s), other)
                        atomic_write_json(p, r)
                finally:
                    c.unlink(missing_ok=True)
                took = True
            done[t] = json.loads(p.read_text())
            pending.remove(t)
            bar.update(1)
        if pending and not took:
            time.sleep(poll_s)          # the rest are other workers' (a dead one's claim is taken over)
    return done


def run_scaling(preset: str | ScalingConfig = "cpu", out=None, force: bool = False, progress: bool = True,
                workers: int = 1, runs_only: bool = False, poll_s: float = 5.0) -> dict:
    """All runs of ``preset`` (skipping those whose result exists unless ``force``), then the analysis,
    the plot, ``results.json`` and ``results.md`` in ``out`` (default ``<home>/runs/scaling-<preset>``).

    ``workers`` > 1 starts that many - 1 more processes on this machine (torch threads shared out among
    them); every process takes the next run nobody has claimed (``claim``), largest first, and this one
    waits for the others' results before the analysis. Another ``python -m eval scaling`` on the same folder
    joins in the same way; a killed worker's run is taken over (and resumed from its checkpoint).
    ``runs_only``: only the runs (a worker), returning {"runs": [...]}.
    """
    from tqdm.auto import tqdm

    from captioner.jepa import views as V
    from captioner.jepa.train import resolve_config
    from captioner.paths import atomic_write_json
    from captioner.world import scenes as W
    from eval.scenelab import lab as S
    from eval.scenelab import measures as M

    cfg, out = _open_folder(preset, out, force, workers)
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

    sources: dict = {}

    def source(m, s):
        # tokenised once per method (and per seed for the documents, whose sentence order is seeded)
        kind = METHODS[m][0]
        key = (kind, s if kind == "ntp" else None)
        if key not in sources:
            sources[key] = (V.TokenViews(corpus, base.text.max_len, warn=False) if kind == "text-jepa"
                            else V.TokenDocuments(corpus, base.text.max_len, seed=s))
        return sources[key]

    def train_one(m, n, s):      # planned siblings not yet measured are measured on this training too
        sib = tuple(x for x in siblings(m) if x != m and x in cfg.methods and not _result_path(out, x, n, s).exists())
        return run_one(cfg, m, n, s, corpus, test_caps, image_side, out, data=source(m, s), also=sib)

    procs, old_threads = _start_workers(cfg, out, workers)
    order = {m: i for i, m in enumerate(cfg.methods)}
    todo = [(m, n, s) for m in cfg.methods for n in sorted({*cfg.ns, *cfg.extra_ns.get(m, [])}) for s in cfg.seeds]
    # largest first: the workers finish together
    pending = sorted(todo, key=lambda t: (-t[1], order[t[0]], t[2]))
    bar = tqdm(total=len(todo), desc=f"scaling {cfg.name}", unit="run", disable=not progress)
    try:
        done = _take_runs(out, train_one, bar, poll_s, pending)
    finally:
        bar.close()
        _stop_workers(procs, bool(pending), old_threads)
    runs = [done[t] for t in todo]
    if runs_only:
        return {"runs": runs}
    # what a perfect representation scores on these held-out scenes: the logistic law's ceiling
    ceiling = M.mutual_knn_ceiling(W.latent_features(test_scenes), cfg.k, seed=lab.seed)
    analysis = analyse(cfg, runs, ceiling=ceiling)
    png = plot(cfg, runs, analysis, out / "scaling.png")
    res = {"config": asdict(cfg), "runs": runs, **analysis, "plot": str(png), "out": str(out),
           "chance_mutual_knn": cfg.k / (cfg.n_test - 1), "mutual_knn_ceiling": ceiling,
           "seconds_this_call": round(time.time() - t0, 1)}
    atomic_write_json(out / "results.json", res)
    (out / "results.md").write_text(format_table(res) + "\n")
    return res
