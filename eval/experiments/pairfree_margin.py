"""Do the pair-free rotations beat the random floor by a clear margin? Retrieval CIDEr and zero-shot accuracy
on the embedded Tux Paint test split for the paired rotation, the two pair-free ones (``pairfree``: the
geometric matcher; ``head``: classifier-head pseudo-pairs) and ``--seeds`` random rotations, whose mean and
standard deviation give each rotation a z-score against the floor.

    python -m eval experiment pairfree-margin [--seeds 10] [--captioner retrieval|decoder] [--prompts captions]
        [--split test|val] [--json] [--out FILE]

CIDEr is pycocoevalcap's (0-10; x100 in the table). The retrieval captioner by default; ``--captioner
decoder`` captions with the pipeline's text-only decoder (trained on first use), reading each rotation's
query as ``decode_input="auto"`` does (``captioner.pipeline_decoder.AUTO_DECODE_INPUT``: the head map's query
as it is, every other rotation's, the random ones too, through DeCap's projection).
"""
from __future__ import annotations

import sys
import time

import click
import numpy as np

from eval.experiments import emit, held_out_captions

ROTATIONS = ("paired", "head", "pairfree")


def run(seeds: int = 10, image_encoder: str = "efficientnet-lite0", text_encoder: str = "minilm-l6",
        progress: bool = True, captioner: str = "retrieval", prompts: str = "templates", split: str = "test") -> dict:
    from alignment.procrustes import fit_random
    from captioner.datasets import get_dataset
    from captioner.evaluation.coco import predict, references, score_captions
    from captioner.evaluation.zeroshot import evaluate_zeroshot
    from captioner.pipeline import Pipeline

    def log(msg):
        if progress:
            print(f"[pairfree_margin] {msg}", file=sys.stderr, flush=True)

    t0 = time.time()
    test = get_dataset("tuxpaint", split)
    pipe = Pipeline(image_encoder, text_encoder, progress=progress, exclude=held_out_captions(split))
    refs = references(test)

    def measure(rot: str) -> dict:
        preds = predict(pipe, test, rot, captioner)
        m = score_captions(preds, {k: refs[k] for k in preds}, meteor=False, spice="off")
        z = evaluate_zeroshot(pipe, "tuxpaint", rot, split=split, prompts=prompts)
        zp = evaluate_zeroshot(pipe, "tuxpaint", rot, split=split, prompts=prompts, prototypes=True)
        return {"CIDEr": float(m["CIDEr"]), "BLEU-1": float(m.get("BLEU-1", np.nan)),
                "top1": float(z["top1"]), "top5": float(z["top5"]),
                "top1_proto": float(zp["top1"]), "top5_proto": float(zp["top5"])}

    rows = {}
    for rot in ROTATIONS:
        log(rot)
        rows[rot] = measure(rot)
    X = pipe._train_images()
    Yb = pipe.bank().E
    rand = []
    for s in range(seeds):
        log(f"random rotation, seed {s}")
        pipe.use_rotation("random", fit_random(X, Yb, seed=s))
        rand.append(measure("random"))
    floor = {k: {"mean": float(np.mean([r[k] for r in rand])), "sd": float(np.std([r[k] for r in rand], ddof=1))}
             for k in rand[0]}
    for rot, r in rows.items():
        r["z_vs_random"] = {k: (r[k] - floor[k]["mean"]) / floor[k]["sd"] if floor[k]["sd"] > 0 else float("inf")
                            for k in floor}
        r["x_random"] = {k: r[k] / floor[k]["mean"] if floor[k]["mean"] > 0 else float("inf") for k in floor}
    return {"dataset": f"tuxpaint/{split}", "n_images": len(test), "image_encoder": image_encoder,
            "text_encoder": text_encoder, "captioner": captioner, "prompts": prompts, "random_seeds": seeds,
            "rotations": rows, "random": floor, "random_runs": rand, "seconds": round(time.time() - t0, 1),
            "scales": "CIDEr on pycocoevalcap's 0-10 scale (x100 in the table); top-1/top-5 as fractions"}


def table(res: dict) -> str:
    f = res["random"]
    lines = [f"Tux Paint {res['dataset'].split('/')[-1]} ({res['n_images']} images), {res['captioner']} captioner, {res['image_encoder']} -> "
             f"{res['text_encoder']}; zero-shot classes: {res.get('prompts', 'templates')}; random floor: mean ± sd over "
             f"{res['random_seeds']} seeds",
             "", "| rotation | pairs used | CIDEr (x100) | z vs random | x random | zero-shot top-1 % | top-5 % | "
                 "z top-1 |", "|---|---|---|---|---|---|---|---|"]
    used = {"paired": "404 train pairs", "head": "none (classifier-head pseudo-pairs)",
            "pairfree": "none (geometric matcher)"}
    for rot, r in res["rotations"].items():
        lines.append(f"| {rot} | {used.get(rot, '')} | {100 * r['CIDEr']:.1f} | {r['z_vs_random']['CIDEr']:.1f} | "
                     f"{r['x_random']['CIDEr']:.1f} | {100 * r['top1']:.1f} | {100 * r['top5']:.1f} | "
                     f"{r['z_vs_random']['top1']:.1f} |")
    lines.append(f"| random (floor) | none | {100 * f['CIDEr']['mean']:.1f} ± {100 * f['CIDEr']['sd']:.1f} | 0 | 1 | "
                 f"{100 * f['top1']['mean']:.1f} ± {100 * f['top1']['sd']:.1f} | "
                 f"{100 * f['top5']['mean']:.1f} ± {100 * f['top5']['sd']:.1f} | 0 |")
    lines += ["", "Zero-shot with class prototypes from the unlabelled train images (--prototypes; the random floor "
              "with prototypes too):", "", "| rotation | zero-shot top-1 % | top-5 % | z top-1 |", "|---|---|---|---|"]
    for rot, r in res["rotations"].items():
        lines.append(f"| {rot} + prototypes | {100 * r['top1_proto']:.1f} | {100 * r['top5_proto']:.1f} | "
                     f"{r['z_vs_random']['top1_proto']:.1f} |")
    lines.append(f"| random (floor) + prototypes | {100 * f['top1_proto']['mean']:.1f} ± "
                 f"{100 * f['top1_proto']['sd']:.1f} | {100 * f['top5_proto']['mean']:.1f} ± "
                 f"{100 * f['top5_proto']['sd']:.1f} | 0 |")
    return "\n".join(lines)


@click.command("pairfree-margin", help=__doc__)
@click.option("--seeds", type=click.IntRange(min=2), default=10, show_default=True,
              help="random rotations for the floor's mean and spread (at least 2)")
@click.option("--image-encoder", default="efficientnet-lite0", show_default=True)
@click.option("--text-encoder", default="minilm-l6", show_default=True)
@click.option("--captioner", default="retrieval", show_default=True, type=click.Choice(("retrieval", "decoder")))
@click.option("--prompts", default="templates", show_default=True, type=click.Choice(("templates", "captions")),
              help="zero-shot classes: the 80 templates, or also the train captions of each category")
@click.option("--split", default="test", show_default=True, type=click.Choice(("test", "val")),
              help="val to choose between settings (its captions then leave the decoder corpus too)")
@click.option("--json", "as_json", is_flag=True, help="print only the JSON")
@click.option("--out", default=None, help="also write the JSON here")
def cli(seeds, image_encoder, text_encoder, captioner, prompts, split, as_json, out):
    res = run(seeds, image_encoder, text_encoder, captioner=captioner, prompts=prompts, split=split)
    emit(res, out, as_json, table(res))
