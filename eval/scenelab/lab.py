"""The scene lab's experiment: train an image JEPA (two renders of one scene), a text JEPA (two paraphrases)
and the next-token baseline (a scene's captions as one document) on the world of ``captioner.world.scenes``,
and score each text side against the image JEPA (and all against the latents) on held-out pairs.
``python -m eval scenelab`` runs ``run_lab``."""
from __future__ import annotations

from dataclasses import asdict

import numpy as np

from captioner.jepa.embed import embed_images, embed_texts, embed_uint8
from captioner.tables import markdown_table
from captioner.world.recipe import (  # noqa: F401  (the lab's names, as before the recipe moved)
    RESTART_SEED_STEP,
    LabConfig,
    augment_config,
    final_loss,
    kept_name,
    kept_run,
    lab_config,
    restarts_of,
    train_and_load,
    train_models,
)
from captioner.world.scenes import LATENT_DIM, held_out_pairs, latent_features
from eval.scenelab.measures import mutual_knn, mutual_knn_ceiling, procrustes_residual, view_subspace


def test_pairs(cfg: LabConfig, image_size: int):
    """Held-out pairs of the lab ``cfg`` (``captioner.world.scenes.held_out_pairs`` of its n_test and seed)."""
    return held_out_pairs(cfg.n_test, cfg.seed, image_size)


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
            a, b = (embed_uint8(model, t["img_data"].images[:n_fit, r]) for r in (0, 1))
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
             ("next-token LM (one document)", "bad", t["ntp"][0], None, "mean"),
             ("next-token LM, last token", "bad", t["ntp"][0], None, "last"),
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
    if max(restarts_of(cfg, kind) for kind in ("image-jepa", "text-jepa", "ntp")) > 1:
        # every model's restarts, the NTP's too: ``kept_run`` (a later --init-from) reads the kept one from here
        res["restarts"] = {"image-jepa": t["image"][3], "text-jepa": t["text"][3], "ntp": t["ntp"][3]}
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
    rows = [[r["side"], r["views"], r["vs"], f"{r['mutual_knn']:.3f}", f"{r['procrustes_residual']:.3f}",
             *((f"{r['mutual_knn_latents']:.3f}", f"{r['procrustes_residual_latents']:.3f}")
               if "mutual_knn_latents" in r else ("-", "-"))] for r in res["rows"]]
    lines = [markdown_table(["representation", "views", "vs", f"mutual {k}-NN", "Procrustes residual",
                             f"mutual {k}-NN vs latents", "residual vs latents"], rows, align="lllrrrr")]
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
