"""What should the world's text-only decoder read: the rotated render, or DeCap's projection onto the bank?

The world's caption bank holds the train scenes' captions only, and the val / test scenes are other scenes
(``captioner.world.data``: a seeded 60 / 10 / 30 % split of the 324 scenes). So the top retrieved caption of
a held-out render always names at least one attribute wrong, and DeCap's projection (the softmax-weighted
mean of bank embeddings) pulls the decoder's input towards those same train scenes. This experiment decodes
the *val* renders (by default; never the test split while choosing) of each seed through the paired and the pair-free (lattice,
disjoint scenes) rotation of the text JEPA, with the decoder reading

- ``projection@T``: DeCap's projection at temperature T (the report used 0.03);
- ``rotation``: the rotated render itself, put at a caption's radius (``captioner.retrieval.onto_manifold``);

and the top retrieved caption beside them. For each it prints how often the caption names every one of the
five attributes right (read with ``captioner.world.scenes.read_caption``), each attribute's rate, and CIDEr
(x100) against the scenes' clean captions. ``--split test`` measures the same on the test renders, once the
input is chosen on val. ``eval.world.chain.DECODE_INPUT`` is the winner.

    python -m eval experiment world-decode-input [--seeds 0,1,2] [--split val|test] [--decoders DIR] [--json]
        [--out FILE]

Needs the world's models (``captioner world train --preset lab --seed N``); the decoders are the report's
(``DIR/decoder-s<seed>-text-jepa.pt``, default ``$CAPTIONER_HOME/world/report-lab``), trained there if absent.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import click
import numpy as np

from eval.experiments import SEEDS, emit

INPUTS = ("retrieved", "projection@0.01", "projection@0.03", "projection@0.1", "projection@0.3", "rotation")
ROTATIONS = ("paired", "lattice-disjoint")
ATTRS = ("colour", "size", "col", "row", "background")


def named_right(captions, dataset) -> dict:
    """Per attribute and for all five at once: the share of ``captions`` (one per sample of ``dataset``)
    naming the value of its sample's clean scene."""
    from captioner.world.scenes import read_caption
    from captioner.world.setting import attribute_labels

    got = [read_caption(c) for c in captions]
    want = attribute_labels(dataset)
    ok = np.array([[g[a] == want[a][i] for a in ATTRS] for i, g in enumerate(got)])
    return {"all": float(ok.all(1).mean()), **{a: float(ok[:, j].mean()) for j, a in enumerate(ATTRS)}}


def seed_rows(seed: int, decoders: Path, preset: str = "lab", split: str = "val") -> list[dict]:
    from captioner.datasets import get_dataset
    from captioner.encoders import get_encoder
    from captioner.world.setting import setting
    from eval.world.chain import (
        TEXT_ENCODERS,
        centred,
        cider,
        decode,
        decoder_for,
        embed,
        fit_rotation,
        text_context,
        world_name,
    )

    st = setting(seed)
    ev = get_dataset("world", split, seed=seed)
    img = world_name("world-image-jepa", preset, seed)
    name = world_name(TEXT_ENCODERS["text-jepa"][1], preset, seed)
    X = embed(img, [s.source() for s in st.train.samples])
    Xv = embed(img, [s.source() for s in ev.samples])
    ctx = text_context(name, st)
    meta = {"x_encoder": get_encoder(img).fingerprint(), "y_encoder": get_encoder(name).fingerprint()}
    dec = decoder_for(name, ctx, decoders / f"decoder-s{seed}-text-jepa.pt")
    rows = []
    for rk in ROTATIONS:
        m, _ = fit_rotation(rk, st, X, ctx["Y"], meta)
        Q = np.asarray(m.transform(Xv), np.float32)
        for how in INPUTS:
            t = time.perf_counter()
            if how == "retrieved":   # the report's retrieval (``chain.score_rotation``): centred cosines
                top = np.argmax(centred(Q, ctx["mu"]) @ ctx["bank_c"].T, 1)
                caps = [ctx["bank"][j] for j in top]
            else:                    # "rotation" or "projection@T"
                kind, _, temp = how.partition("@")
                caps = decode(dec, Q, ctx, how=kind, temperature=float(temp or 0.03))
            rows.append({"seed": seed, "split": split, "rotation": rk, "input": how, "captions": caps,
                         "named": named_right(caps, ev), "seconds": round(time.perf_counter() - t, 2)})
    tmp = [{"captions": r["captions"]} for r in rows]
    cider(tmp, ev)
    for r, c in zip(rows, tmp):
        r["cider_x100"] = c["cider_x100"]
        r["example"] = r.pop("captions")[0]
    return rows


def summary(rows) -> list[dict]:
    out = []
    for rk in ROTATIONS:
        for how in INPUTS:
            sel = [r for r in rows if r["rotation"] == rk and r["input"] == how]
            out.append({"rotation": rk, "input": how, "seeds": [r["seed"] for r in sel],
                        "all": [r["named"]["all"] for r in sel], "cider_x100": [r["cider_x100"] for r in sel],
                        **{a: float(np.mean([r["named"][a] for r in sel])) for a in ATTRS}})
    return out


def table(summ) -> str:
    def ms(v, f):
        return f"{np.mean(v) * f:.1f} +- {np.std(v, ddof=1) * f:.1f}" if len(v) > 1 else f"{v[0] * f:.1f}"

    lines = ["| rotation | decoder reads | all five named right, % (per seed) | CIDEr x100 | "
             + " | ".join(f"{a} %" for a in ATTRS) + " |", "|---" * (4 + len(ATTRS)) + "|"]
    for s in summ:
        per = ", ".join(f"{100 * v:.1f}" for v in s["all"])
        lines.append(f"| {s['rotation']} | {s['input']} | {ms(s['all'], 100)} ({per}) | {ms(s['cider_x100'], 1)} | "
                     + " | ".join(f"{100 * s[a]:.1f}" for a in ATTRS) + " |")
    return "\n".join(lines)


@click.command("world-decode-input", help=__doc__)
@click.option("--seeds", type=SEEDS, default="0,1,2", show_default=True)
@click.option("--preset", default="lab", show_default=True, help="the world models' preset")
@click.option("--decoders", default=None, help="folder of the report's decoders (default "
              "$CAPTIONER_HOME/world/report-<preset>)")
@click.option("--split", default="val", show_default=True, type=click.Choice(("val", "test")),
              help="val (where the input is chosen) or test (the chosen input, measured once)")
@click.option("--json", "as_json", is_flag=True, help="print only the JSON")
@click.option("--out", default=None, help="also write the JSON here")
def cli(seeds, preset, decoders, split, as_json, out):
    from captioner.paths import home

    decoders = Path(decoders) if decoders else home() / "world" / f"report-{preset}"
    decoders.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    rows = [r for s in seeds for r in seed_rows(s, decoders, preset, split=split)]
    summ = summary(rows)
    res = {"rows": rows, "summary": summ, "seconds": round(time.time() - t0, 1),
           "loadavg": [round(x, 2) for x in os.getloadavg()]}
    emit(res, out, as_json, table(summ))
