"""How much do the decoder's Tux Paint CIDEr figures depend on its training seed? The text-only decoder
(preset small) is trained once per ``--seeds`` value on the same corpus, and each rotation's decoded captions
of the split are scored; the retrieval captions of the same rotations (no decoder, no seed) are the
reference.

    python -m eval experiment decoder-seeds [--seeds 0,1,2] [--split test|val] [--steps N] [--ema DECAY] [--json] [--out FILE]

The pipeline's decoder corpus holds the Tux Paint val captions (``captioner.bank.decoder_corpus``): with
``--split val`` every decoder is trained without them (as the test captions always are), so that val can
choose a training recipe (``--steps``) that test then measures once.

Seed 0 is the pipeline's default decoder (``captioner.decoder.TrainConfig.seed``), the one every other
decoder figure in the docs uses; each other seed trains a decoder of its own into the checkpoint cache
(about 2 minutes each on 2 cores). CIDEr is pycocoevalcap's, x100 in the table.
"""
from __future__ import annotations

import sys
import time

import click
import numpy as np

from captioner.tables import markdown_table
from eval.experiments import SEEDS, emit, held_out_captions

ROTATIONS = ("paired", "head")


def run(seeds=(0, 1, 2), split: str = "test", steps: int | None = None, progress: bool = True,
        ema: float = 0.0) -> dict:
    from captioner.datasets import get_dataset
    from captioner.evaluation.coco import predict, references, score_captions
    from captioner.pipeline import Pipeline

    t0 = time.time()
    ds = get_dataset("tuxpaint", split)
    refs = references(ds)
    held = held_out_captions(split)

    def cider(pipe, rot, captioner):
        preds = predict(pipe, ds, rot, captioner)
        return 100 * float(score_captions(preds, {k: refs[k] for k in preds}, meteor=False, spice="off")["CIDEr"])

    rows = []
    retrieval = None
    for seed in seeds:
        over = {k: v for k, v in (("seed", seed), ("steps", steps), ("ema", ema)) if v}  # 0 / None: the default
        pipe = Pipeline(progress=progress, decoder_overrides=over, exclude=held)
        if retrieval is None:
            retrieval = {rot: cider(pipe, rot, "retrieval") for rot in ROTATIONS}
        if progress:
            print(f"[decoder_seeds] decoder seed {seed}", file=sys.stderr, flush=True)
        rows.append({"seed": seed, **{rot: cider(pipe, rot, "decoder") for rot in ROTATIONS}})
    return {"dataset": f"tuxpaint/{split}", "n_images": len(ds), "steps": steps or "preset", "ema": ema, "seeds": list(seeds),
            "retrieval": retrieval, "decoder": rows, "summary": summarise(rows), "seconds": round(time.time() - t0, 1)}


def summarise(rows: list[dict]) -> dict:
    """Mean, sample sd (0 for one seed), min and max of each rotation's CIDEr over the seeds' rows."""
    return {rot: {"mean": float(np.mean([r[rot] for r in rows])),
                  "sd": float(np.std([r[rot] for r in rows], ddof=1)) if len(rows) > 1 else 0.0,
                  "min": float(min(r[rot] for r in rows)), "max": float(max(r[rot] for r in rows))}
            for rot in ROTATIONS}


def table(res: dict) -> str:
    r = res["retrieval"]
    lines = [f"Decoder CIDEr x100 by training seed, {res['dataset']} ({res['n_images']} images), "
             f"steps: {res['steps']}, ema: {res.get('ema') or 'off'}; retrieval (no decoder): paired {r['paired']:.1f}, head {r['head']:.1f}", ""]
    rows = [[row["seed"], f"{row['paired']:.1f}", f"{row['head']:.1f}", f"{100 * row['head'] / row['paired']:.0f} %",
             f"{100 * row['head'] / r['paired']:.0f} %"] for row in res["decoder"]]
    s = res["summary"]
    rows.append(["mean ± sd", f"{s['paired']['mean']:.1f} ± {s['paired']['sd']:.1f}",
                 f"{s['head']['mean']:.1f} ± {s['head']['sd']:.1f}",
                 f"{100 * s['head']['mean'] / s['paired']['mean']:.0f} %", f"{100 * s['head']['mean'] / r['paired']:.0f} %"])
    lines.append(markdown_table(["decoder seed", "paired", "head (no pair)", "head / paired decoder",
                                 "head / paired retrieval"], rows, compact=True))
    return "\n".join(lines)


@click.command("decoder-seeds", help=__doc__)
@click.option("--seeds", type=SEEDS, default="0,1,2", show_default=True, help="decoder training seeds")
@click.option("--split", default="test", show_default=True, type=click.Choice(("test", "val")))
@click.option("--steps", type=click.IntRange(min=1), default=None, help="training steps instead of the preset's")
@click.option("--ema", type=float, default=0.0, show_default=True,
              help="train with a moving average of the weights (decay)")
@click.option("--json", "as_json", is_flag=True, help="print only the JSON")
@click.option("--out", default=None, help="also write the JSON here")
def cli(seeds, split, steps, ema, as_json, out):
    res = run(seeds, split, steps, ema=ema)
    emit(res, out, as_json, table(res))
