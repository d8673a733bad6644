"""``captioner align``: fit and score maps from image-embedding space to text-embedding space."""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path

import click

from alignment.pairfree import MATCHERS
from captioner.errors import CacheMismatchError, CaptionerError
from captioner.rotations import ALIASES, ALL, KINDS

METHODS = (*ALL, *ALIASES)
MATCHER_NAMES = tuple(MATCHERS)


@contextmanager
def user_errors():
    """alignment/ is pure math with its own errors; the CLI shows them as one-line captioner errors."""
    from alignment.errors import AlignmentError, MismatchError

    try:
        yield
    except MismatchError as e:
        raise CacheMismatchError(str(e)) from None
    except AlignmentError as e:
        raise CaptionerError(str(e)) from None


def load_cache(path, modality: str):
    from captioner.cache import load_embeddings

    es = load_embeddings(path)
    got = es.meta.get("modality")
    if got and got != modality:
        raise CaptionerError(f"{path}: holds {got} embeddings, but was given as the {modality} cache")
    return es


def _describe(es) -> dict:
    m = es.meta
    return {"path": str(es.path), "dataset": f"{m.get('dataset')}/{m.get('split')}", "key": m.get("key"),
            "N": int(es.X.shape[0]), "D": int(es.X.shape[1])}


def cache_pairs(img, txt, reduce: str):
    """Paired rows (X (M, D1), Y (M, D2), sample ids) of two caches by sample id."""
    from captioner.cache import paired

    return paired(img, txt, reduce=reduce)


def _text_groups(img, txt):
    """For each image row, the text rows of the same sample (ground truth, for reporting only)."""
    rows: dict = {}
    for r, sid in enumerate(txt.sample_ids):
        rows.setdefault(sid, []).append(r)
    return [rows.get(sid, []) for sid in img.sample_ids]


def _retrieval(rot, img, txt, ks=(1, 5, 10)) -> dict | None:
    """image -> caption recall of the mapped image rows against every caption row of the text cache."""
    from alignment.metrics import recall_at_k

    gt = _text_groups(img, txt)
    keep = [i for i, g in enumerate(gt) if g]
    if not keep:
        return None
    r = recall_at_k(rot.transform(img.X[keep]), txt.X, [gt[i] for i in keep], ks=ks)
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}


@click.group("align")
def cli():
    """Fit, score and diagnose maps from image-embedding space to text-embedding space.

    Maps: paired Procrustes (a rotation fitted on image-caption pairs), pair-free (a rotation found with no
    pairs at all), ridge (the non-orthogonal upper bound) and random (the floor)."""


class _CacheSource:
    """Two embedding caches as a ``captioner.rotations.FitSource``. Paired kinds read rows with the same
    sample id; unpaired kinds read each cache alone (the text cloud: every caption row, or one per sample)."""

    def __init__(self, img, txt, meta: dict, reduce: str, text_rows: str, quiet: bool):
        self.img, self.txt, self.meta, self.reduce, self.text_rows, self.quiet = img, txt, meta, reduce, text_rows, quiet
        self.n_pairs = None
        self.text_sample_ids = list(txt.sample_ids)

    def pairs(self):
        X, Y, sids = cache_pairs(self.img, self.txt, self.reduce)
        self.n_pairs = len(sids)
        return X, Y

    def images(self):
        return self.img.X

    def texts(self):
        import numpy as np

        if self.text_rows == "all":
            return self.txt.X
        groups: dict = {}
        for r, sid in enumerate(self.txt.sample_ids):
            groups.setdefault(sid, []).append(r)
        self.text_sample_ids = list(groups)
        return np.stack([self.txt.X[g[0]] if self.text_rows == "first" else self.txt.X[g].mean(0)
                         for g in groups.values()])

    def _encoder(self, es):
        from captioner.encoders import get_encoder

        name = (es.meta.get("encoder") or {}).get("name")
        if not name:
            raise CaptionerError(f"{es.path}: the cache does not name its encoder, which this rotation needs")
        return get_encoder(name)

    def image_encoder(self):
        return self._encoder(self.img)

    def text_encoder(self):
        return self._encoder(self.txt)

    def log(self, msg: str) -> None:
        if not self.quiet:
            click.echo(f"[align] {msg}", err=True)


@cli.command("fit")
@click.option("--method", "-m", type=click.Choice(METHODS), default="paired", show_default=True,
              help="; ".join(f"{k}: {v.label}" for k, v in KINDS.items()) + " (procrustes: the old name of paired).")
@click.option("--image-cache", "-a", required=True, type=click.Path(), help="Image embedding cache (captioner embed).")
@click.option("--text-cache", "-b", required=True, type=click.Path(), help="Text embedding cache (captioner embed).")
@click.option("--out", "-o", type=click.Path(), default=None,
              help="Where to save the map (default: $CAPTIONER_HOME/rotations/<method>-<encoders>-<dataset>).")
@click.option("--dim", type=int, default=None, help="Shared dimension (default min(D_image, D_text), capped by N-1).")
@click.option("--shared", type=click.Choice(["pca", "learned"]), default="pca", show_default=True,
              help="paired with different dimensions: PCA per side, or one semi-orthogonal map from the pairs.")
@click.option("--scale/--no-scale", default=False, show_default=True, help="Also fit a global scale.")
@click.option("--reduce", type=click.Choice(["first", "mean"]), default="mean", show_default=True,
              help="Paired methods: a sample's text row is its first caption or the mean of its captions.")
@click.option("--text-rows", type=click.Choice(["all", "first", "mean"]), default="all", show_default=True,
              help="Unpaired methods: the text cloud is every caption row, or one row per sample.")
@click.option("--alpha", type=float, default=None, help="ridge strength (default: leave-one-out choice).")
@click.option("--matcher", type=click.Choice(list(MATCHER_NAMES)), default="auto", show_default=True,
              help="pairfree: the matcher (captioner align matchers lists them with one line each).")
@click.option("--cards", default=None,
              help="lattice matcher: the number of values of each attribute, e.g. 6,2,3,3,3 for the world "
                   "(colour, size, column, row, background); omitted, they are estimated from each cloud.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def fit_cmd(method, image_cache, text_cache, out, dim, shared, scale, reduce, text_rows, alpha, matcher, cards,
            seed, as_json):
    """Fit a map from the image cache's space to the text cache's space and save it.

    Paired kinds use the pairs (rows with the same sample id); pairfree uses no pairing information at all:
    both clouds are shuffled independently before matching, and the sample ids are read only afterwards, to
    report how many matches were right. random keeps only each side's mean and axes; head reads the image
    encoder's classifier head instead of pairs."""
    from captioner.rotations import get_kind

    kind = get_kind(method)
    img, txt = load_cache(image_cache, "image"), load_cache(text_cache, "text")
    meta = {"x_encoder": img.meta.get("encoder"), "y_encoder": txt.meta.get("encoder"),
            "datasets": {"image": _describe(img)["dataset"], "text": _describe(txt)["dataset"]},
            "caches": {"image": _describe(img), "text": _describe(txt)}}
    given = {"scale": scale, "dim": dim, "shared": shared, "alpha": alpha, "matcher": matcher, "seed": seed,
             "progress": not as_json, "max": None, "cards": cards}
    src = _CacheSource(img, txt, meta, reduce, text_rows, as_json)
    t0 = time.time()
    report: dict = {}
    with user_errors():
        fitted = kind.fit(src, **kind.options(**{k: v for k, v in given.items() if k in kind.defaults}))
        rot = fitted.map
        rot.meta.update(meta)
        if kind.uses_pairs:
            rot.meta["pairing"] = {"by": "sample_id", "n_pairs": src.n_pairs,
                                   "text_row": "mean of the sample's caption embeddings" if reduce == "mean"
                                   else "first caption of the sample"}
        else:
            rot.meta["pairing"] = {"by": "none", "n_pairs": 0, "how": kind.pairing}
        if "result" in fitted.extra:
            report["pairfree"] = _match_diagnostics(fitted.extra, img, src.text_sample_ids)
            rot.meta["pairing"].update({"shuffled": True, "seed": seed, "text_rows": text_rows,
                                        "n_images": len(fitted.extra["xi"]), "n_texts": len(fitted.extra["yi"]),
                                        "matcher": rot.meta["pairfree"]["matcher"]})
            rot.meta["diagnostics"] = report["pairfree"]
        rot.meta["fit_seconds"] = round(time.time() - t0, 3)
        if out is None:
            from captioner.paths import slug, subdir

            enc = f"{slug((meta['x_encoder'] or {}).get('name', 'image'))}-{slug((meta['y_encoder'] or {}).get('name', 'text'))}"
            out = subdir("rotations") / f"{kind.name}-{enc}-{slug(meta['datasets']['image'])}.safetensors"
        path = rot.save(out)
        report["retrieval_on_fit_caches"] = _retrieval(rot, img, txt)
    summary = {"method": kind.name, "path": str(path), "dim_x": rot.dim_x, "dim_y": rot.dim_y, "dim": rot.dim,
               "scale": round(float(rot.scale), 6), "seconds": rot.meta["fit_seconds"],
               "pairing": rot.meta.get("pairing"), **report}
    if as_json:
        click.echo(json.dumps(summary))
        return
    click.echo(f"{kind.name} map {rot.dim_x} -> {rot.dim_y} (shared {rot.dim}) -> {path} ({summary['seconds']:.2f} s)")
    p = summary["pairing"] or {}
    click.echo(f"  pairs used: {p.get('n_pairs', 0)}" + (f" ({p['text_row']})" if p.get("text_row") else ""))
    if "pairfree" in report:
        d = report["pairfree"]
        click.echo(f"  unsupervised score {d['unsupervised_score']}; diagnostic (not used to fit): "
                   f"{d['match_accuracy_diagnostic']} of matches right, chance {d['chance']}")
    r = report.get("retrieval_on_fit_caches")
    if r:
        click.echo(f"  image->caption on these caches: R@1 {r['R@1']:.3f}  R@5 {r['R@5']:.3f}  "
                   f"R@10 {r['R@10']:.3f}  (chance@1 {r['chance@1']:.3f})")


def _match_diagnostics(extra: dict, img, ysid: list) -> dict:
    """After a pair-free fit: how often a matched text row belongs to the image's own sample (read only now,
    never by the fit)."""
    import numpy as np

    res, xi, yi = extra["result"], extra["xi"], extra["yi"]
    matched = res.perm >= 0
    right = [ysid[yi[res.perm[i]]] == img.sample_ids[xi[i]] for i in np.flatnonzero(matched)]
    return {"unsupervised_score": round(float(res.score), 4), "matched": int(matched.sum()),
            "match_accuracy_diagnostic": round(float(np.mean(right)), 4) if right else None,
            "chance": round(1.0 / max(len(set(ysid)), 1), 4)}


@cli.command("score")
@click.option("--image-cache", "-a", required=True, type=click.Path())
@click.option("--text-cache", "-b", required=True, type=click.Path())
@click.option("--metric", "metrics", multiple=True, default=("mutual_knn",), show_default=True,
              help="mutual_knn, cka, unbiased_cka, cknna, svcca (repeatable), or 'all'.")
@click.option("--null", "n_null", type=int, default=0, show_default=True,
              help="Also score N shuffled pairings (the chance level).")
@click.option("--k", "topk", type=int, default=10, show_default=True, help="Neighbours for the k-NN metrics.")
@click.option("--reduce", type=click.Choice(["first", "mean"]), default="mean", show_default=True)
@click.option("--rotation", "-r", type=click.Path(), default=None,
              help="A saved map: also report image->caption recall through it.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def score_cmd(image_cache, text_cache, metrics, n_null, topk, reduce, rotation, seed, as_json):
    """Score how aligned two caches are on their pairs (rows with the same sample id), against chance."""
    from alignment.metrics import METRICS, permutation_null, score

    names = list(METRICS) if "all" in metrics else list(metrics)
    bad = [m for m in names if m not in METRICS]
    if bad:
        raise CaptionerError(f"unknown metric {bad[0]!r}; choose from {', '.join(METRICS)} or 'all'")
    img, txt = load_cache(image_cache, "image"), load_cache(text_cache, "text")
    rows = []
    with user_errors():
        rot = None
        if rotation:  # checked first: a map for other encoders should fail before any scoring work
            from alignment.maps import load_map

            rot = load_map(rotation, x_encoder=img.meta.get("encoder"), y_encoder=txt.meta.get("encoder"))
        X, Y, sids = cache_pairs(img, txt, reduce)
        for name in names:
            kw = {"k": topk} if name in ("mutual_knn", "cknna") else {}
            if n_null:
                r = permutation_null(name, X, Y, n_perm=n_null, seed=seed, **kw)
            else:
                r = {"metric": name, "score": score(name, X, Y, **kw)}
            rows.append(r)
        retrieval = _retrieval(rot, img, txt) if rot is not None else None
        if retrieval is not None:  # FOSCTTM of the mapped pairs, cosine after centring on the text side's mean
            from alignment.metrics import foscttm

            my = Y.mean(0)
            retrieval["foscttm"] = round(foscttm(rot.transform(X) - my, Y - my, metric="cosine"), 6)
    out = {"n_pairs": len(sids), "image": _describe(img), "text": _describe(txt), "reduce": reduce,
           "metrics": rows, "retrieval": retrieval}
    if as_json:
        click.echo(json.dumps(out))
        return
    click.echo(f"{len(sids)} pairs ({out['image']['dataset']}; text row = {reduce} of each sample's captions)")
    click.echo(f"{'metric':<14} {'score':>8}" + (f" {'null mean':>10} {'null sd':>8} {'z':>7}" if n_null else ""))
    for r in rows:
        line = f"{r['metric']:<14} {r['score']:>8.4f}"
        if n_null:
            line += f" {r['null_mean']:>10.4f} {r['null_std']:>8.4f} {r['z']:>7.1f}"
        click.echo(line)
    if retrieval:
        click.echo(f"image->caption via {Path(rotation).name}: R@1 {retrieval['R@1']:.3f}  R@5 {retrieval['R@5']:.3f}"
                   f"  R@10 {retrieval['R@10']:.3f}  (chance@1 {retrieval['chance@1']:.3f})  "
                   f"FOSCTTM {retrieval['foscttm']:.2e} (chance 0.5)")


@cli.command("matchers")
def matchers_cmd():
    """List the pair-free matchers (--matcher of align fit, --matchers of `python -m eval align bench --real`)."""
    for name, (_, line) in MATCHERS.items():
        click.echo(f"{name:<11} {line}")
