"""Where a scene-lab run's residual comes from: a decomposition of each JEPA's gap to the latents.

    python -m eval scenelab diagnose LAB [--views 8] [--json]

``LAB`` is a finished ``python -m eval scenelab --out LAB`` folder (its kept image and text JEPAs). On the
324 held-out scenes, each JEPA's embedding is compared with the whitened latents (``latent_features``)
in five ways, all held out (fitted on one half of the scenes, scored on the other, as the lab's residual):

- **rotation**: the lab's own residual (rotation + scale), 0 = the same space up to a rotation;
- **linear**: a general affine map instead (least squares). Rotation minus linear is a *linear
  distortion* (the right information, the wrong metric: some directions stretched);
- **whitened, then rotation**: each side whitened on its own (no pairs, no labels) before the rotation:
  the part of the linear distortion that isotropy alone fixes;
- **mean of V views, then rotation**: the embedding averaged over ``--views`` observations of each scene
  (renders with other jitter seeds, or other paraphrases; clean): what is left once per-observation noise
  is averaged away;
- **probe accuracy** per attribute: a linear read-out (least squares onto the one-hot, argmax), so a lost
  attribute shows by name.

and text vs image the same way (rotation, linear, whitened; the whitened residual is still pair-free up to
the final rotation). What is left after "linear" is what no linear map recovers: the second table splits
it into pairwise interactions between attributes and the rest (``interaction_fractions``).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import click
import numpy as np


def linear_residual(X: np.ndarray, Y: np.ndarray, seed: int = 0, ridge: float = 1e-6) -> float:
    """Held-out 1 - R^2 of the least-squares affine map X -> Y, fitted on half the rows (the same split
    as ``scenelab.procrustes_residual``)."""
    from eval.scenelab.measures import holdout_split

    X = np.asarray(X, np.float64)
    Y = np.asarray(Y, np.float64)
    fi, ev = holdout_split(len(X), seed=seed)
    mx, my = X[fi].mean(0), Y[fi].mean(0)
    A = X[fi] - mx
    W = np.linalg.solve(A.T @ A + ridge * len(fi) * np.eye(A.shape[1]), A.T @ (Y[fi] - my))
    pred = (X[ev] - mx) @ W + my
    return float(((pred - Y[ev]) ** 2).sum() / ((Y[ev] - my) ** 2).sum())


def whiten(X: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """X centred and whitened by its own covariance (ZCA): identity covariance, no labels used."""
    from eval.scenelab.measures import whitening

    mu, W = whitening(X, eps)
    return (np.asarray(X, np.float64) - mu) @ W


def probe_accuracy(X: np.ndarray, scenes, seed: int = 0) -> dict:
    """Per attribute: held-out accuracy of a linear read-out (least squares onto the one-hot, argmax)."""
    from eval.scenelab.measures import holdout_split

    X = np.asarray(X, np.float64)
    fi, ev = holdout_split(len(X), seed=seed)
    Xa = np.concatenate([X, np.ones((len(X), 1))], 1)
    out = {}
    for name, oh in _onehots(scenes).items():
        W = np.linalg.lstsq(Xa[fi], oh[fi], rcond=None)[0]
        out[name] = float(((Xa[ev] @ W).argmax(1) == oh[ev].argmax(1)).mean())
    return out


def _onehots(scenes) -> dict:
    from captioner.world.scenes import ATTRS

    return {name: np.array([[float(getattr(sc, name) == v) for v in options] for sc in scenes])
            for name, options in ATTRS.items()}


def interaction_fractions(X: np.ndarray, scenes) -> dict:
    """How far the embedding is from *additive* in the attributes (the theorem's answer is additive: a
    sum of one vector per attribute value). Over the scenes given (all 324: in-sample, no split):

    - ``non_additive``: fraction of the embedding's variance that no additive model explains;
    - ``after_pairs``: what is left once every pairwise interaction (attribute a's value x b's) joins;
    - ``pairs_chance``: the share of ``non_additive`` that the pairwise terms would take from a rest with
      no structure at all (their number of free columns over the residual degrees of freedom), times
      ``non_additive``. ``non_additive - after_pairs`` well above this is a warp made of pairs; near it,
      the rest is of higher order.
    """
    import itertools

    X = np.asarray(X, np.float64)
    X = X - X.mean(0)
    oh = _onehots(scenes)

    def rest(blocks):
        D = np.concatenate([np.ones((len(X), 1))] + blocks, 1)
        W, *_ = np.linalg.lstsq(D, X, rcond=None)
        return float(((X - D @ W) ** 2).sum() / (X ** 2).sum()), np.linalg.matrix_rank(D)

    add, r_add = rest(list(oh.values()))

    def chance(rank):
        """What columns taking the design to ``rank`` would take from a structureless rest."""
        return add * (rank - r_add) / max(1, len(X) - r_add)

    names = list(itertools.combinations(oh, 2))
    pairs = [(oh[a][:, :, None] * oh[b][:, None, :]).reshape(len(X), -1) for a, b in names]
    after, r_pairs = rest(list(oh.values()) + pairs)
    # each pair alone beside the additive model: what it takes, and what it would take from a structureless rest
    by_pair = {}
    for (a, b), P in zip(names, pairs):
        r, rk = rest(list(oh.values()) + [P])
        by_pair[f"{a}x{b}"] = {"share": add - r, "chance": chance(rk)}
    return {"non_additive": add, "after_pairs": after, "pairs_chance": chance(r_pairs), "by_pair": by_pair}


def load_kept(lab: Path, kind: str):
    """The model a finished lab kept for ``kind`` (``scenelab.kept_run``), in eval mode, and its config."""
    from captioner.errors import CaptionerError
    from captioner.jepa.encoder import load_jepa_encoder
    from eval.scenelab.lab import kept_run

    run = kept_run(lab, kind)
    if not (run / "checkpoint.pt").is_file():
        raise CaptionerError(f"scenelab_diagnose: no {kind} checkpoint in {run}; "
                             f"run `python -m eval scenelab --out {lab}` first")
    enc = load_jepa_encoder(run / "checkpoint.pt")
    return enc.model, enc.cfg


def side_report(X: np.ndarray, Xmean: np.ndarray, Z: np.ndarray, scenes) -> dict:
    from eval.scenelab.measures import procrustes_residual

    return {"rotation": procrustes_residual(X, Z), "linear": linear_residual(X, Z),
            "whitened": procrustes_residual(whiten(X), Z), "mean_views": procrustes_residual(Xmean, Z),
            "probe": probe_accuracy(X, scenes), "interactions": interaction_fractions(X, scenes)}


def run(lab, views: int = 8) -> dict:
    import torch

    from captioner.jepa import embed as E
    from captioner.paths import atomic_write_json
    from captioner.world import scenes as W
    from eval.scenelab import lab as S
    from eval.scenelab import measures as M

    torch.set_num_threads(1)
    lab = Path(lab)
    t0 = time.time()
    cfg = S.lab_config(lab) or S.LabConfig()
    img, icfg = load_kept(lab, "image-jepa")
    txt, tcfg = load_kept(lab, "text-jepa")
    size, max_len = icfg.image.image_size, tcfg.text.max_len
    if icfg.image.embed_dim != W.LATENT_DIM or tcfg.text.embed_dim != W.LATENT_DIM:
        from captioner.errors import CaptionerError

        raise CaptionerError(f"scenelab_diagnose: {lab} has embeddings of width {icfg.image.embed_dim} (image) and "
                             f"{tcfg.text.embed_dim} (text); the decomposition is for width {W.LATENT_DIM}, the "
                             "latents' (the lab scores wider runs on their view subspace)")
    scenes, ims, caps = S.test_pairs(cfg, size)
    Z = W.latent_features(scenes)
    Xi = E.embed_images(img, ims)
    Xt = E.embed_texts(txt, "text-jepa", caps, max_len)
    # further clean observations of each held-out scene: renders with other jitter seeds, other paraphrases
    Xi_views = [E.embed_images(img, [W.render(sc, size, seed=950_000 + 1000 * v + i, corrupt=0.0)
                                     for i, sc in enumerate(scenes)]) for v in range(views)]
    Xt_views = [E.embed_texts(txt, "text-jepa", [W.describe(sc, seed=750_000 + 1000 * v + i, corrupt=0.0)
                                                 for i, sc in enumerate(scenes)], max_len) for v in range(views)]
    Xi_mean, Xt_mean = np.mean(Xi_views, 0), np.mean(Xt_views, 0)
    res = {"lab": str(lab), "views": views, "n_test": len(scenes),
           "image": side_report(Xi, Xi_mean, Z, scenes), "text": side_report(Xt, Xt_mean, Z, scenes),
           "text_vs_image": {"rotation": M.procrustes_residual(Xt, Xi), "linear": linear_residual(Xt, Xi),
                             "whitened": M.procrustes_residual(whiten(Xt), whiten(Xi)),
                             "mean_views": M.procrustes_residual(Xt_mean, Xi_mean)},
           "seconds": round(time.time() - t0, 1)}
    atomic_write_json(lab / "diagnose.json", res)
    return res


def table(res: dict) -> str:
    lines = [f"| pair | rotation | linear | whitened, then rotation | mean of {res['views']} views, then rotation "
             "| probe accuracy (colour / size / col / row / background) |", "| --- | ---: | ---: | ---: | ---: | --- |"]
    for key, name in (("image", "image JEPA vs latents"), ("text", "text JEPA vs latents"),
                      ("text_vs_image", "text JEPA vs image JEPA")):
        r = res[key]
        probe = " / ".join(f"{v:.2f}" for v in r["probe"].values()) if "probe" in r else "-"
        lines.append(f"| {name} | {r['rotation']:.3f} | {r['linear']:.3f} | {r['whitened']:.3f} | "
                     f"{r['mean_views']:.3f} | {probe} |")
    lines.append("\n| JEPA | variance not additive in the attributes | left after all pairwise interactions "
                 "| pairs' share if the rest had no structure |\n| --- | ---: | ---: | ---: |")
    for key in ("image", "text"):
        it = res[key]["interactions"]
        lines.append(f"| {key} | {it['non_additive']:.3f} | {it['after_pairs']:.3f} | {it['pairs_chance']:.3f} |")
    pairs = {key: res[key]["interactions"]["by_pair"] for key in ("image", "text")}
    lines.append("\n| JEPA | " + " | ".join(k.replace("x", " x ") for k in pairs["image"])
                 + " |\n| --- |" + " ---: |" * len(pairs["image"]))
    rows = [(key, bp, "share") for key, bp in pairs.items()] + [("(image, structureless rest)", pairs["image"], "chance")]
    for name, bp, field in rows:
        lines.append(f"| {name} | " + " | ".join(f"{v[field]:.3f}" for v in bp.values()) + " |")
    lines.append("\n(variance each pairwise interaction takes alone, beside the additive model; the last row is "
                 "what it would take from the image JEPA's rest if that rest had no structure)")
    lines.append(f"\n{res['n_test']} held-out scenes, held-out residuals (fitted on one half, scored on the other; "
                 f"0 = the same space up to the map named); {res['lab']}; {res['seconds']} s.")
    return "\n".join(lines)


@click.command("diagnose", help=__doc__)
@click.argument("lab", type=click.Path())
@click.option("--views", type=int, default=8, show_default=True, help="observations averaged per scene")
@click.option("--json", "as_json", is_flag=True, help="print the JSON as well")
def cli(lab, views, as_json):
    res = run(lab, views)
    if as_json:
        print(json.dumps(res, indent=2))
    print(table(res))
