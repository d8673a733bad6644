"""The lattice matcher's own null on the world: is what it finds for a text encoder more than the cards give?

The lattice matcher (``alignment.lattice``) maps value vectors onto value vectors, and the attribute
cardinalities (6,2,3,3,3) already pair colour with colour and size with size whatever it finds. So a wrong
answer of the lattice matcher is not a random rotation, and the world report's random-rotation floor is not
its null. This experiment draws that null: the same two factorisations (renders and captions of disjoint
scenes, as the report's ``lattice-disjoint`` row), with the correspondence drawn at random
(``alignment.lattice.random_correspondence``: equal-cardinality attributes paired and values ordered by
chance), against the correspondence the matcher finds and against random rotations. A text encoder whose
found correspondence scores within the random-correspondence spread carries no alignment the matcher could
use (the bad-views prediction); one far above it does.

    python -m eval experiment world-lattice-floor [--seeds 0,1,2] [--draws 10] [--json]

Needs the world's models for each seed (``captioner world train --preset lab --seed N``).
"""
from __future__ import annotations

import json
import time

import click
import numpy as np

from eval.experiments import SEEDS

TEXT = ("text-jepa", "ntp", "ntp-last", "untrained")
KINDS = ("found", "random correspondence", "random rotation")


def seed_rows(seed: int, draws: int, preset: str = "lab", text=TEXT) -> list[dict]:
    from alignment.lattice import factorize_cached, lattice_rotation, random_correspondence
    from captioner.rotations import ArraySource, get_kind
    from captioner.world.scenes import CARDS
    from captioner.world.setting import setting
    from eval.world.chain import (
        ROTATIONS,
        TEXT_ENCODERS,
        cider,
        embed,
        fit_rotation,
        score_rotation,
        text_context,
        world_name,
    )

    st = setting(seed)
    img = world_name("world-image-jepa", preset, seed)
    X = embed(img, [s.source() for s in st.train.samples])
    Xt = embed(img, [s.source() for s in st.test.samples])
    Xd = X[st.disjoint_images]
    rows = []
    for tk in text:
        ctx = text_context(world_name(TEXT_ENCODERS[tk][1], preset, seed), st)
        Yd = ctx["Y"][st.disjoint_captions]
        # the report's own fit (rows shuffled apart by the pairfree kind), then its two factorisations again
        rot_name, opts, _, _ = ROTATIONS["lattice-disjoint"]
        rot_kind = get_kind(rot_name)
        fitted = rot_kind.fit(ArraySource(meta={}, X=Xd, Y=Yd), **rot_kind.options(**opts))
        fx = factorize_cached(Xd[fitted.extra["xi"]], CARDS)
        fy = factorize_cached(Yd[fitted.extra["yi"]], CARDS)
        maps = [("found", fitted.map)]
        rng = np.random.default_rng(1000 + seed)
        maps += [("random correspondence", lattice_rotation(fx, fy, random_correspondence(CARDS, rng))[0])
                 for _ in range(draws)]
        maps += [("random rotation", fit_rotation("random", st, X, ctx["Y"], {}, seed=r)[0]) for r in range(draws)]
        for kind, m in maps:
            res = score_rotation(np.asarray(m.transform(Xt), np.float32), ctx)
            rows.append({"seed": seed, "text": tk, "kind": kind, **res})
    cider(rows, st.test)
    for r in rows:
        r.pop("captions")
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """Per text encoder: CIDEr and mean zero-shot of each kind (mean +- std over all its rows) and the found
    correspondence's z against the random correspondences."""
    out = []
    for tk in dict.fromkeys(r["text"] for r in rows):
        line = {"text": tk}
        for metric in ("cider_x100", "zeroshot_mean"):
            vals = {k: np.array([r[metric] for r in rows if r["text"] == tk and r["kind"] == k]) for k in KINDS}
            for k, v in vals.items():
                line[f"{metric}/{k}"] = [float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0]
            null = vals["random correspondence"]
            line[f"{metric}/z_found"] = [float((f - null.mean()) / max(null.std(ddof=1), 1e-12))
                                         for f in vals["found"]]
        out.append(line)
    return out


def table(summ: list[dict]) -> str:
    head = ("| text encoder | metric | found (per-seed mean +- std) | random correspondence | random rotation | "
            "z of found vs random corr. (per seed) |\n|---|---|---:|---:|---:|---|")
    lines = [head]
    for s in summ:
        for metric, nd in (("cider_x100", 1), ("zeroshot_mean", 3)):
            cell = [f"{s[f'{metric}/{k}'][0]:.{nd}f} +- {s[f'{metric}/{k}'][1]:.{nd}f}" for k in KINDS]
            z = ", ".join(f"{v:+.1f}" for v in s[f"{metric}/z_found"])
            lines.append(f"| {s['text']} | {metric} | {' | '.join(cell)} | {z} |")
    return "\n".join(lines)


@click.command("world-lattice-floor", help=__doc__)
@click.option("--seeds", type=SEEDS, default="0,1,2", show_default=True)
@click.option("--draws", type=int, default=10, show_default=True,
              help="random correspondences and random rotations a seed")
@click.option("--preset", default="lab", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the rows too")
def cli(seeds, draws, preset, as_json):
    t0 = time.time()
    rows = [r for s in seeds for r in seed_rows(s, draws, preset)]
    summ = summary(rows)
    print(json.dumps({"seeds": ",".join(map(str, seeds)), "draws": draws, "summary": summ,
                      "seconds": round(time.time() - t0, 1), **({"rows": rows} if as_json else {})}, indent=1))
    print(table(summ))
