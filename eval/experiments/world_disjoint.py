"""Why the world's disjoint-scene setting defeats every pair-free matcher: the two sides do not show the same
world.

For each seed, the renders and captions that the pair-free matcher gets in the *disjoint scenes* setting
(``captioner.world.setting``) are summarised by

* the effective number of scenes on each side (1 / sum of squared scene frequencies in the draw): the skewed
  prior concentrates each side on a handful of scenes;
* each attribute's value frequencies on each side, their total-variation distance, and whether the most
  frequent value is the same on both sides. Without pairs the values of an attribute can only be told apart
  by these frequencies (the world is symmetric otherwise), so where they disagree the true rotation is not
  what the data support.

Then two draws meant to show both sides the same world, still with no scene in common: the same scene sets
*raked* (iterative proportional fitting of each side's scene weights to the prior's exact attribute
frequencies), and a *balanced* split (of 2,000 seeded 60 / 40 splits of the train scenes, the one whose two
sides' prior-weighted attribute frequencies are closest), drawn by the prior. For contrast, the *same scenes*
setting, where both sides are drawn from all the train scenes: there the objective's minimum sits at the
oracle.

With the world's models (``captioner world train --preset lab --seed N``), each of the two draws also gets an
identifiability probe in the whitened space of each side (where the true relation is orthogonal): the
third-cumulant mismatch ``||K3_A[Q] - K3_B||^2`` at the oracle rotation (whitened Procrustes on the train
pairs, which a pair-free method should find) and at the nearest local minimum from it, with R@1 and
zero-shot top-1 at both, and the matcher "ours" on the same draw. A local minimum well below the oracle's
value and far from it in accuracy means the objective prefers a wrong rotation: no search can fix that.

    python -m eval experiment world-disjoint [--seeds 0,1,2] [--preset lab] [--no-probe] [--json]
"""
from __future__ import annotations

import json
import os
import sys
import time

import click
import numpy as np

from eval.experiments import SEEDS


def rake(keys: list, iters: int = 200) -> np.ndarray:
    """Weights over ``keys`` (scene keys, one per row) whose attribute value frequencies match the prior's
    (``captioner.world.setting.PRIOR``, normalised), by iterative proportional fitting. Where a side's few scenes
    cannot reach those frequencies (a sparse support) it stops short: the table shows the distance left."""
    from captioner.world import scenes as W
    from captioner.world.setting import ATTRIBUTES, PRIOR, attribute_values

    vals = attribute_values(keys)
    w = np.ones(len(keys))
    for _ in range(iters):
        for a in ATTRIBUTES:
            k = len(W.ATTRS[a])
            target = PRIOR[a] ** np.arange(k)
            target /= target.sum()
            cur = np.bincount(vals[a], weights=w, minlength=k) / w.sum()
            w = w * (target / np.maximum(cur, 1e-12))[vals[a]]
    return w / w.sum()


def balanced_split(st, tries: int = 2000) -> set:
    """The 60 % of the train scenes (for the renders) whose prior-weighted attribute frequencies are closest
    to those of the other 40 % (smallest largest total-variation distance over ``tries`` seeded splits)."""
    from captioner.world import scenes as W
    from captioner.world.setting import ATTRIBUTES, attribute_values, prior_weights

    scenes = sorted({s.label for s in st.train.samples})
    w = prior_weights(scenes)
    vals = attribute_values(scenes)
    rng = np.random.default_rng(st.seed + 60_000)
    n1 = int(round(0.6 * len(scenes)))
    best, best_tv = None, np.inf
    for _ in range(tries):
        side = np.zeros(len(scenes), bool)
        side[rng.permutation(len(scenes))[:n1]] = True
        tv = 0.0
        for a in ATTRIBUTES:
            k = len(W.ATTRS[a])
            f1 = np.bincount(vals[a][side], weights=w[side], minlength=k) / w[side].sum()
            f2 = np.bincount(vals[a][~side], weights=w[~side], minlength=k) / w[~side].sum()
            tv = max(tv, 0.5 * float(np.abs(f1 - f2).sum()))
        if tv < best_tv:
            best, best_tv = side.copy(), tv
    return {sc for sc, on in zip(scenes, best) if on}


def draws(st) -> dict:
    """(image rows, caption rows) of the disjoint setting: as drawn by ``captioner.world.setting``; the same scene
    sets raked to the prior's frequencies; and a balanced split of the scenes (``balanced_split``) drawn by
    the prior. No scene is on both sides in any of them. For contrast, the *same scenes* setting (both sides
    drawn from all the train scenes)."""
    from captioner.world.setting import N_CAPTIONS, N_IMAGES, prior_weights

    img_keys = [s.label for s in st.train.samples]
    rng = np.random.default_rng(st.seed + 50_000)

    def rows(first):
        return (np.array([i for i, k in enumerate(img_keys) if k in first]),
                np.array([j for j, k in enumerate(st.bank_scene) if k not in first]))

    def draw(r, p, n):
        return rng.choice(r, n, p=p / p.sum())

    uni_img, uni_cap = st.uniform_images, st.uniform_captions   # the disjoint scene sets, every row once
    raked = (draw(uni_img, rake([img_keys[i] for i in uni_img]), N_IMAGES),
             draw(uni_cap, rake([st.bank_scene[j] for j in uni_cap]), N_CAPTIONS))
    b_img, b_cap = rows(balanced_split(st))
    balanced = (draw(b_img, prior_weights([img_keys[i] for i in b_img]), N_IMAGES),
                draw(b_cap, prior_weights([st.bank_scene[j] for j in b_cap]), N_CAPTIONS))
    return {"drawn": (st.disjoint_images, st.disjoint_captions), "raked": raked, "balanced": balanced,
            "same scenes": (st.same_images, st.same_captions)}


def _whiten(Z):
    mu = Z.mean(0)
    e, V = np.linalg.eigh(np.cov((Z - mu).T))
    return mu, V @ np.diag(e ** -0.5) @ V.T, V @ np.diag(e ** 0.5) @ V.T


def probe(X, Y, xi, yi, pair_caption, Xt, ctx, iters: int = 300) -> dict:
    """The third-cumulant objective at the oracle rotation and at the local minimum reached from it."""
    import torch

    from eval.world.chain import score_rotation

    muA, WA, _ = _whiten(X[xi])
    muB, WB, WBi = _whiten(Y[yi])
    U, _, Vt = np.linalg.svd(((X - muA) @ WA).T @ ((Y[pair_caption] - muB) @ WB))
    oracle = U @ Vt

    def k3(Z):
        Z = torch.tensor(Z, dtype=torch.float64)
        return torch.einsum("ni,nj,nk->ijk", Z, Z, Z) / len(Z)

    KA, KB = k3((X[xi] - muA) @ WA), k3((Y[yi] - muB) @ WB)

    def loss(Q):
        return ((torch.einsum("ijk,ia,jb,kc->abc", KA, Q, Q, Q) - KB) ** 2).sum()

    Q0 = torch.tensor(oracle)
    P = torch.zeros_like(Q0, requires_grad=True)
    opt = torch.optim.Adam([P], lr=0.02)
    for _ in range(iters):
        L = loss(Q0 @ torch.matrix_exp(P - P.T))
        opt.zero_grad()
        L.backward()
        opt.step()
    with torch.no_grad():
        Qloc = (Q0 @ torch.matrix_exp(P - P.T)).numpy()

    def scores(Qw):
        u, _, vt = np.linalg.svd(WA @ Qw @ WBi)   # the nearest rotation in the encoders' own spaces
        r = score_rotation(((Xt - muA) @ (u @ vt) + muB).astype(np.float32), ctx)
        return r["r_at_1"], r["zeroshot_mean"]

    o, lo = scores(oracle), scores(Qloc)
    return {"k3_oracle": float(loss(Q0)), "k3_local": float(loss(torch.tensor(Qloc))),
            "oracle_r1": o[0], "oracle_zs": o[1], "local_r1": lo[0], "local_zs": lo[1]}


def run(seeds=(0, 1, 2), preset: str = "lab", with_probe: bool = True) -> dict:
    from captioner.world.setting import compare_sides, setting, side_stats
    from eval.world import chain

    out = []
    for seed in seeds:
        st = setting(seed)
        X = Xt = ctx = None
        if with_probe:
            img = chain.world_name("world-image-jepa", preset, seed)
            X = chain.embed(img, [s.source() for s in st.train.samples])
            Xt = chain.embed(img, [s.source() for s in st.test.samples])
            ctx = chain.text_context(chain.world_name("world-text-jepa", preset, seed), st)
        for name, (xi, yi) in draws(st).items():
            a = side_stats([st.train.samples[i].label for i in xi])
            b = side_stats([st.bank_scene[j] for j in yi])
            row = {"seed": seed, "draw": name, "images": a, "captions": b, **compare_sides(a, b)}
            if with_probe:
                from alignment.pairfree import match

                row.update(probe(X, ctx["Y"], xi, yi, st.pair_caption, Xt, ctx))
                res = match(X[xi], ctx["Y"][yi], method="ours")
                r = chain.score_rotation(np.asarray(res.rotation.transform(Xt), np.float32), ctx)
                row.update({"ours_r1": r["r_at_1"], "ours_zs": r["zeroshot_mean"]})
            out.append(row)
    return {"preset": preset, "rows": out, "loadavg": os.getloadavg()}


def table(res: dict) -> str:
    head = ["seed", "draw", "eff. scenes img / cap", "max TV (attr.)", "most frequent value agrees"]
    if "ours_r1" in res["rows"][0]:
        head += ["K3 at oracle -> local min", "R@1 oracle -> local min", "zero-shot oracle -> local min",
                 "ours R@1 / zero-shot"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in res["rows"]:
        worst = max(r["tv"], key=r["tv"].get)
        agree = ", ".join(a for a, ok in r["mode_agrees"].items() if not ok)
        cells = [str(r["seed"]), r["draw"],
                 f"{r['images']['effective_scenes']:.1f} / {r['captions']['effective_scenes']:.1f}",
                 f"{r['max_tv']:.2f} ({worst})", "all" if not agree else f"not for {agree}"]
        if "ours_r1" in r:
            cells += [f"{r['k3_oracle']:.0f} -> {r['k3_local']:.0f}", f"{r['oracle_r1']:.2f} -> {r['local_r1']:.2f}",
                      f"{r['oracle_zs']:.2f} -> {r['local_zs']:.2f}", f"{r['ours_r1']:.2f} / {r['ours_zs']:.2f}"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


@click.command("world-disjoint", help=__doc__)
@click.option("--seeds", type=SEEDS, default="0,1,2", show_default=True)
@click.option("--preset", default="lab", show_default=True)
@click.option("--no-probe", is_flag=True, help="frequencies only (no world models needed)")
@click.option("--json", "as_json", is_flag=True)
def cli(seeds, preset, no_probe, as_json):
    t0 = time.time()
    res = run(seeds, preset, not no_probe)
    print(json.dumps(res, indent=1) if as_json else table(res))
    print(f"{time.time() - t0:.0f} s; load average {res['loadavg']}", file=sys.stderr)
