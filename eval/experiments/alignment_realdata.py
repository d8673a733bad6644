"""Pair-free vs paired alignment on real encoders: Tux Paint, EfficientNet-Lite0 images -> MiniLM-L6 captions.

Every map is fitted on the train split and scored on the test split:

* paired Procrustes (train pairs; the upper bound for one rotation), at the full shared dimension and at
  ``--dim`` (the dimension the pair-free matchers work in);
* ridge (train pairs; the non-orthogonal least-squares map);
* random rotation (the floor; mean and spread over ``--random-seeds`` seeds);
* pair-free via the image encoder's classifier head (``head``): the ImageNet head's class probabilities of
  each train image times the text embeddings of the class names give soft targets; Procrustes to them;
* pair-free, no pairs at all: train images and train captions shuffled independently, then
  ``ours`` (PCA sign search + mutual-NN Procrustes), ``wp`` (coarse-to-fine Wasserstein-Procrustes, mean and
  spread over ``--seeds``) and POT's entropic Gromov-Wasserstein (``gw``).

Scores on the test split: image -> caption R@1/R@5/R@10 and median rank (queries: test images; keys: every
test caption row; a hit is any caption of the query's sample) and mutual k-NN (k=10) between the mapped
test images and their captions. Mutual k-NN compares each side's own neighbourhoods, so it barely moves
under an orthogonal map: it measures the encoders more than the rotation; the encoders' own value is given
against a permutation null.

Usage::

    python -m eval experiment alignment-realdata [--json] [--out results.json] [--seeds 3]

Caches come from ``captioner.cache.embed`` (reused from $CAPTIONER_HOME when present).
"""
from __future__ import annotations

import json
import sys
import time

import click
import numpy as np


def load_split(split: str, image_encoder="efficientnet-lite0", text_encoder="minilm-l6", dataset="tuxpaint"):
    """(image EmbeddingSet, text EmbeddingSet) of one split, from the cache (encoded on first use)."""
    from captioner.cache import embed
    from captioner.datasets import get_dataset

    ds = get_dataset(dataset, split)
    return embed(image_encoder, ds, "image", progress=False), embed(text_encoder, ds, "text", progress=False)


def evaluate(rot, img, txt, k: int = 10) -> dict:
    """Test-split scores of one map: image -> caption recall and mutual k-NN of mapped images vs captions."""
    from alignment.metrics import mutual_knn, recall_at_k
    from captioner.cache import paired

    rows: dict = {}
    for r, sid in enumerate(txt.sample_ids):
        rows.setdefault(sid, []).append(r)
    keep = [i for i, sid in enumerate(img.sample_ids) if sid in rows]
    Z = rot.transform(img.X[keep])
    rec = recall_at_k(Z, txt.X, [rows[img.sample_ids[i]] for i in keep], ks=(1, 5, 10))
    X, Y, _ = paired(img, txt, reduce="mean")
    return {"R@1": rec["R@1"], "R@5": rec["R@5"], "R@10": rec["R@10"], "median_rank": rec["median_rank"],
            "chance@1": rec["chance@1"], "mutual_knn": mutual_knn(rot.transform(X), Y, k=k),
            "n_queries": rec["n_queries"], "n_keys": rec["n_keys"]}


def head_rotation_scores(itr, ttr, ite, tte, meta) -> dict:
    """The ``head`` rotation (captioner.pipeline): train images x the image encoder's ImageNet head, class
    names embedded by the text encoder, Procrustes to the soft targets, centred on the train captions."""
    from alignment.pseudo import DEFAULT_TEMPERATURE
    from captioner.rotations import ArraySource, get_kind

    t = time.time()
    kind = get_kind("head")
    rot = kind.fit(ArraySource(meta, X=itr.X, Y=ttr.X, image_enc=itr.meta["encoder"]["name"],
                               text_enc=ttr.meta["encoder"]["name"]), **kind.options()).map
    return {**evaluate(rot, ite, tte), "seconds": round(time.time() - t, 1), "temperature": DEFAULT_TEMPERATURE,
            "head": rot.meta["fit"]["head"]}


def _summary(runs: list) -> dict:
    """Mean and standard deviation over several runs of the same method."""
    out = {}
    for key in ("R@1", "R@5", "R@10", "median_rank", "mutual_knn"):
        v = np.array([r[key] for r in runs], dtype=float)
        out[key] = float(v.mean())
        out[key + "_sd"] = float(v.std(ddof=1)) if len(v) > 1 else 0.0
    out.update(chance=runs[0]["chance@1"], n_queries=runs[0]["n_queries"], n_keys=runs[0]["n_keys"], runs=len(runs))
    return out


def _pair_accuracy(res, img, txt, xi, yi) -> float:
    """Diagnostic only (after fitting): fraction of matched train images whose caption is their own."""
    ok = np.flatnonzero(res.perm >= 0)
    return float(np.mean([txt.sample_ids[yi[res.perm[i]]] == img.sample_ids[xi[i]] for i in ok])) if len(ok) else 0.0


def run(dim: int = 32, seeds: int = 3, random_seeds: int = 20, gw: bool = True, progress: bool = True) -> dict:
    from alignment.metrics import permutation_null
    from alignment.pairfree import match
    from alignment.procrustes import fit_procrustes, fit_random, fit_ridge
    from captioner.cache import paired

    def log(msg):
        if progress:
            print(f"[alignment_realdata] {msg}", file=sys.stderr, flush=True)

    t0 = time.time()
    itr, ttr = load_split("train")
    ite, tte = load_split("test")
    Xtr, Ytr, sids = paired(itr, ttr, reduce="mean")
    Xte, Yte, _ = paired(ite, tte, reduce="mean")
    meta = {"x_encoder": itr.meta["encoder"], "y_encoder": ttr.meta["encoder"]}
    res: dict = {
        "setup": {"dataset": "tuxpaint", "image_encoder": itr.meta["encoder"]["name"],
                  "text_encoder": ttr.meta["encoder"]["name"], "train_images": len(itr.X),
                  "train_captions": len(ttr.X), "train_pairs": len(sids), "test_images": len(ite.X),
                  "test_captions": len(tte.X), "dim_pairfree": dim, "text_row_for_pairs": "mean of the sample's captions"},
        "encoders_test_alignment": {m: permutation_null(m, Xte, Yte, n_perm=20, seed=0)
                                    for m in ("mutual_knn", "unbiased_cka")},
        "maps": {},
    }
    maps = res["maps"]
    log("paired Procrustes, ridge")
    full = fit_procrustes(Xtr, Ytr, **meta)
    maps["procrustes (paired, full dim)"] = {**evaluate(full, ite, tte), "dim": full.dim}
    maps[f"procrustes (paired, dim {dim})"] = {**evaluate(fit_procrustes(Xtr, Ytr, dim=dim, **meta), ite, tte),
                                               "dim": dim}
    ridge = fit_ridge(Xtr, Ytr, **meta)
    maps["ridge (paired)"] = {**evaluate(ridge, ite, tte), "alpha": ridge.meta["fit"]["alpha"]}
    log(f"random rotations x{random_seeds}")
    for d, name in ((None, "random (full dim)"), (dim, f"random (dim {dim})")):
        maps[name] = _summary([evaluate(fit_random(itr.X, ttr.X, dim=d, seed=s), ite, tte)
                               for s in range(random_seeds)])

    # pair-free: images and captions shuffled independently; sample ids are read only for the diagnostic
    def pairfree(method, seed, **kw):
        rng = np.random.default_rng(seed)
        xi, yi = rng.permutation(len(itr.X)), rng.permutation(len(ttr.X))
        t = time.time()
        r = match(itr.X[xi], ttr.X[yi], method=method, seed=seed, **kw)
        return {**evaluate(r.rotation, ite, tte), "seconds": round(time.time() - t, 1),
                "train_match_accuracy": _pair_accuracy(r, itr, ttr, xi, yi),
                "unsupervised": {k: r.info[k] for k in ("mutual_rate", "ot_cost") if k in r.info}}

    log("pair-free: classifier-head pseudo-pairs")
    maps["pair-free head (classifier pseudo-pairs)"] = head_rotation_scores(itr, ttr, ite, tte, meta)
    log("pair-free: ours")
    maps[f"pair-free ours (dim {dim})"] = pairfree("ours", 0, dim=dim)
    wp_runs = []
    for s in range(seeds):
        log(f"pair-free: Wasserstein-Procrustes seed {s}")
        wp_runs.append(pairfree("wp", s, dim=dim))
    maps[f"pair-free wp (dim {dim})"] = {**_summary(wp_runs), "per_seed": wp_runs}
    if gw:
        log("pair-free: entropic GW (POT)")
        maps[f"pair-free gw (dim {dim})"] = pairfree("gw", 0, dim=dim)
    res["seconds"] = round(time.time() - t0, 1)
    return res


def table(res: dict) -> str:
    s = res["setup"]
    lines = [f"Tux Paint: {s['image_encoder']} images -> {s['text_encoder']} captions; fitted on train "
             f"({s['train_pairs']} pairs), scored on test ({s['test_images']} images vs {s['test_captions']} captions)",
             "", "| map | R@1 | R@5 | R@10 | median rank | mutual kNN |", "|---|---|---|---|---|---|"]

    def fmt(m, key, nd=3):
        v = m[key]
        sd = m.get(key + "_sd")
        return f"{v:.{nd}f} ± {sd:.{nd}f}" if sd is not None and m.get("runs", 1) > 1 else f"{v:.{nd}f}"

    for name, m in res["maps"].items():
        lines.append(f"| {name} | {fmt(m, 'R@1')} | {fmt(m, 'R@5')} | {fmt(m, 'R@10')} | {fmt(m, 'median_rank', 1)} "
                     f"| {fmt(m, 'mutual_knn')} |")
    any_m = next(iter(res["maps"].values()))
    lines.append(f"\nchance R@1 {any_m.get('chance@1', any_m.get('chance')):.3f}; ± is the standard deviation over seeds")
    e = res["encoders_test_alignment"]
    lines.append("encoders on the test pairs: " + "; ".join(
        f"{k} {v['score']:.3f} (null {v['null_mean']:.3f} ± {v['null_std']:.3f}, z {v['z']:.1f})" for k, v in e.items()))
    return "\n".join(lines)


@click.command("alignment-realdata", help=__doc__)
@click.option("--dim", type=int, default=32, show_default=True, help="shared dimension of the pair-free matchers")
@click.option("--seeds", type=int, default=3, show_default=True,
              help="seeds (shuffles) of the Wasserstein-Procrustes matcher")
@click.option("--random-seeds", type=int, default=20, show_default=True)
@click.option("--no-gw", is_flag=True)
@click.option("--json", "as_json", is_flag=True, help="print only the JSON")
@click.option("--out", default=None, help="also write the JSON here")
def cli(dim, seeds, random_seeds, no_gw, as_json, out):
    res = run(dim, seeds, random_seeds, gw=not no_gw)
    blob = json.dumps(res, indent=2, default=float)
    if out:
        with open(out, "w") as f:
            f.write(blob + "\n")
    print(blob)
    if not as_json:
        print()
        print(table(res))
