"""Head pseudo-pair seeds refined on unpaired data (``alignment.seeds``) vs the plain ``head`` rotation and
paired Procrustes: image -> caption R@1 on the Tux Paint test pairs (85) and, for the train images, of
their own caption among the bank (no pair is used to fit; sample ids only score).

    python -m eval experiment pairfree-seeds [--image-encoder efficientnet-lite0] [--text-encoder minilm-l6]
"""
from __future__ import annotations

import json
import os

import click
import numpy as np


def run(image_encoder: str = "efficientnet-lite0", text_encoder: str = "minilm-l6") -> dict:
    from alignment.metrics import recall_at_k
    from alignment.seeds import head_seeds, refine
    from captioner.cache import embed, paired
    from captioner.datasets import get_dataset
    from captioner.encoders.heads import HEAD_PROMPT, classifier_head
    from captioner.pipeline import Pipeline

    pipe = Pipeline(image_encoder, text_encoder, progress=False)
    X, Y, _ = pipe.train_pairs()
    Xtr, bank = pipe._train_images(), pipe.bank()
    W, b, names = classifier_head(pipe.encoder("image"))
    E = pipe.encoder("text").encode([HEAD_PROMPT.format(c=n) for n in names])
    test = get_dataset("tuxpaint", "test")
    Xt, Yt, _ = paired(embed(pipe.encoder("image"), test, "image", progress=False),
                       embed(pipe.encoder("text"), test, "text", progress=False))

    def score(rot) -> dict:
        rt = recall_at_k(rot.transform(Xt) - Yt.mean(0), Yt - Yt.mean(0), np.arange(len(Yt)))
        rr = recall_at_k(rot.transform(X) - Y.mean(0), Y - Y.mean(0), np.arange(len(Y)))
        return {"test_R@1": round(rt["R@1"], 3), "train_R@1": round(rr["R@1"], 3)}

    rows = {"paired (404 pairs)": score(pipe.rotation("paired")), "head": score(pipe.rotation("head"))}
    L = Xtr @ W.T + b
    for top in (0.25, 0.5, 1.0):
        rws, T, _ = head_seeds(Xtr, L, E, top=top)
        for iters in (0, 10, 30):
            rot = refine(Xtr, bank.E, Xtr[rws], T, iters=iters, seed_center="own")
            rows[f"seeded top {top:.0%}, {iters} CSLS rounds"] = score(rot)
    return {"image_encoder": image_encoder, "text_encoder": text_encoder, "rows": rows,
            "loadavg": os.getloadavg()}


@click.command("pairfree-seeds", help=__doc__)
@click.option("--image-encoder", default="efficientnet-lite0", show_default=True)
@click.option("--text-encoder", default="minilm-l6", show_default=True)
def cli(image_encoder, text_encoder):
    res = run(image_encoder, text_encoder)
    print(json.dumps(res, default=float))
    print("\n| rotation | test R@1 | train image -> own caption R@1 |\n|---|---|---|")
    for k, r in res["rows"].items():
        print(f"| {k} | {r['test_R@1']:.3f} | {r['train_R@1']:.3f} |")
