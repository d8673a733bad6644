"""Which rotation, bank and captioner names the subject of everyday photos? (issue 20's measurement)

For every candidate: the share of validation photos (GCompris val, openclipart val; never the held-out test
splits) whose caption names the photo's subject (``captioner.subject.names_subject``: the label, its
synonyms, or a WordNet hypernym up to two levels).

Candidates:
- ``<rotation> / <bank>``: rotate the image embedding with ``paired`` / ``head`` / ``pairfree`` (fitted on
  Tux Paint train as in the pipeline) and take the top-1 retrieved caption of the ``tuxpaint`` bank (369 train
  captions) or the ``default`` broad bank (``captioner.bank.bank_sets("default")``);
- ``<rotation> / decoder``: the text-only decoder's caption of that rotation's query (what ``captioner caption
  --rotation R`` prints; the decoder reads the query as ``decode_input="auto"`` does), unless ``--no-decoder``;
- ``classifier / <bank>``: no rotation: the image encoder's own ImageNet classifier head gives class
  probabilities p; the text query is sum_c p_c t_c over the class-name prompt embeddings t_c, around their
  mean, and the top-1 bank caption around the bank's mean is the caption (text-to-text retrieval; no
  image-caption pair anywhere; ``captioner.photocaption.classifier_retrieve``);
- ``classifier-name``: the top-1 ImageNet class name itself;
- ``classifier-name, else paired-broad / default``: the top-1 class name when its probability is at least
  ``FALLBACK_BELOW`` (0.1), else the top-1 ``default`` bank caption under a Procrustes map fitted on the
  image-caption pairs of Tux Paint train and openclipart train (drawings with their titles): not a pair-free
  candidate, and measured only, not the default (see docs/results/captions.md);
- ``alternatives ...``: not one caption but the 5 alternatives ``captioner caption`` lists under it (default
  bank, the default classifier encoder), with the template copies of one name skipped as the CLI does, and
  kept: the share of photos for which one of the 5 names the subject.

The classifier candidates are measured with the classifier head of each of EfficientNet-Lite0 (the rotations'
image encoder), -Lite1 and -Lite2, tagged with the encoder's name; the rotation candidates use Lite0.

    python -m eval photos-val [--split val] [--bank-limit N] [--json] [--out FILE]
"""
from __future__ import annotations

import json
import os
import sys
import time

import click
import numpy as np

# the classifier's top-1 probability under which "classifier-name, else paired-broad" takes the mapped caption
# (chosen on these validation photos from 0 / .05 / .1 / .15 / .2 / .3: GCompris 0.512 / 0.512 / 0.524 /
# 0.500 / 0.464 / 0.417, openclipart 0.085 / 0.117 / 0.184 / 0.213 / 0.231 / 0.240)
FALLBACK_BELOW = 0.1
BROAD_PAIRS = ("tuxpaint", "openclipart")


def with_fallback(P: np.ndarray, names, fallback: list[str], below: float = FALLBACK_BELOW) -> list[str]:
    """The classifier captioner's caption of the top-1 class (``captioner.photocaption.name_caption``) where
    its probability (rows of ``P``) is at least ``below``, else the row's ``fallback`` caption."""
    from captioner.photocaption import name_caption

    top = P.argmax(1)
    return [name_caption(names[c]) if P[i, c] >= below else fallback[i] for i, c in enumerate(top)]


def broad_paired_map(pipe, datasets=BROAD_PAIRS):
    """Procrustes map from ``pipe``'s image encoder to its text encoder fitted on the train splits of
    ``datasets`` (each image paired with the mean embedding of its captions)."""
    from alignment.procrustes import fit_procrustes
    from captioner.cache import embed
    from captioner.datasets import get_dataset

    X, T = [], []
    for name in datasets:
        ds = get_dataset(name, split="train")
        ei, et = embed(pipe.encoder("image"), ds, "image"), embed(pipe.encoder("text"), ds, "text")
        rows = {}
        for sid, t in zip(et.sample_ids, et.X):
            rows.setdefault(sid, []).append(t)
        for sid, x in zip(ei.sample_ids, ei.X):
            if sid in rows:
                X.append(x)
                T.append(np.mean(rows[sid], 0))
    return fit_procrustes(np.asarray(X, np.float32), np.asarray(T, np.float32)), len(X)


def _rate(caps, samples, extra_of) -> float:
    from captioner.subject import names_subject

    hits = [names_subject(c, s.label, extra_of(s.label)) for c, s in zip(caps, samples)]
    return float(np.mean(hits)) if hits else float("nan")


def _class_name_bounds(P: np.ndarray, names, samples) -> dict:
    """Upper bounds of a class-name caption, not captions: the share of photos whose top-5
    class names include one that names the subject, and whose subject some class of the head names at all."""
    from captioner.datasets.gcompris import subject_extra
    from captioner.photocaption import name_caption
    from captioner.subject import names_subject

    caps = [name_caption(n) for n in names]
    if not samples:
        return {"bound: a top-5 class name names it": float("nan"), "bound: some class name names it": float("nan")}
    hit5 = [any(names_subject(caps[j], s.label, subject_extra(s.label)) for j in top)
            for s, top in zip(samples, np.argsort(-P, 1)[:, :5])]
    some = {lab: any(names_subject(c, lab, subject_extra(lab)) for c in caps) for lab in {s.label for s in samples}}
    # the denominator of ``_rate``: every photo
    return {"bound: a top-5 class name names it": float(np.mean(hit5)),
            "bound: some class name names it": float(np.mean([some[s.label] for s in samples]))}


def _alternatives(Q: np.ndarray, bank, samples, k: int = 5) -> dict:
    """Share of photos for which one of the classifier captioner's ``k`` alternatives names the subject, with
    template copies skipped (as listed) and kept."""
    from captioner.datasets.gcompris import subject_extra
    from captioner.photocaption import classifier_retrieve
    from captioner.subject import names_subject

    out = {}
    for copies, what in ((False, "copies skipped, as listed"), (True, "template copies kept")):
        idx, _ = classifier_retrieve(Q, bank, k, copies=copies)
        out[f"alternatives: one of {k} names it ({what})"] = float(np.mean(
            [any(names_subject(bank.texts[j], s.label, subject_extra(s.label)) for j in row)
             for row, s in zip(idx, samples)]))
    return out


def text_retrieve_top1(Q: np.ndarray, bank) -> list[str]:
    """Top-1 bank caption for the classifier's class queries, as the classifier captioner retrieves it."""
    from captioner.photocaption import classifier_retrieve

    return [bank.texts[i[0]] for i in classifier_retrieve(Q, bank, 1, copies=True)[0]]


def _rows(es, sample_ids) -> np.ndarray:
    """The rows of an embedding set in the order of ``sample_ids`` (another encoder's set of one dataset)."""
    pos = {s: i for i, s in enumerate(es.sample_ids)}
    missing = [s for s in sample_ids if s not in pos]
    if missing:
        raise SystemExit(f"photos_val: {len(missing)} image(s) embedded by one encoder but not another "
                         f"(first: {missing[0]}); rerun to retry them")
    return es.X[[pos[s] for s in sample_ids]]


def evaluate(split: str = "val", bank_limit: int | None = None, rotations=("paired", "head", "pairfree"),
             samples_per_set: int | None = None, decoder: bool = True,
             classifier_encoders=("efficientnet-lite1", "efficientnet-lite2")) -> dict:
    from captioner.bank import bank_sets, build_bank
    from captioner.cache import embed
    from captioner.datasets import get_dataset
    from captioner.datasets.gcompris import subject_extra
    from captioner.photocaption import CLASSIFIER_ENCODER, classifier_queries, name_caption
    from captioner.pipeline import Pipeline
    from captioner.retrieval import retrieve, to_text_space

    pipe = Pipeline(progress=True, bank="default", bank_limit=bank_limit)
    extra_pipes = [Pipeline(image_encoder=e, progress=True, bank="default", bank_limit=bank_limit)
                   for e in dict.fromkeys(classifier_encoders) if e != pipe.image_encoder]
    sets = {n: get_dataset(n, split=split) for n in ("gcompris", "openclipart")}
    evaluated = [c for d in sets.values() for c in d.captions()]
    banks = {"tuxpaint": pipe.bank()}
    t0 = time.perf_counter()
    pipe.caption_bank()  # the broad bank as the CLI builds it (shares its cache), then less the val captions
    banks["default"] = build_bank(pipe.encoder("text"), bank_sets("default", bank_limit), exclude=evaluated)
    bank_s = time.perf_counter() - t0
    fb_pipe = next((q for q in (pipe, *extra_pipes) if q.image_encoder == CLASSIFIER_ENCODER), None)
    broad, broad_n = broad_paired_map(fb_pipe) if fb_pipe is not None else (None, 0)
    rows, samples_out = [], {}
    for dname, ds in sets.items():
        es = embed(pipe.encoder("image"), ds, "image")
        by_id = {s.id: s for s in ds.samples}
        samples = [by_id[i] for i in es.sample_ids]
        X = es.X
        cands, bounds = {}, {}
        for r in rotations:
            Q = to_text_space(pipe.serving_rotation(r), X, pipe.bank().dim)  # every bank has the text encoder's dim
            for bname, bank in banks.items():
                idx, _ = retrieve(Q, bank, 1)
                cands[f"{r} / {bname}"] = [bank.texts[i[0]] for i in idx]
            if decoder:  # the rotation's decoded caption, as `caption --rotation R` gives it
                cands[f"{r} / decoder"] = [o["caption"] for o in pipe.caption_queries(Q, 1, True, rotation=r)]
        for cpipe in (pipe, *extra_pipes):  # the classifier head of each image encoder compared
            tag = f" ({cpipe.image_encoder})"
            Xc = X if cpipe is pipe else _rows(embed(cpipe.encoder("image"), ds, "image"), es.sample_ids)
            Qc, names, P = classifier_queries(cpipe, Xc)
            for bname, bank in banks.items():
                cands[f"classifier / {bname}{tag}"] = text_retrieve_top1(Qc, bank)
            cands[f"classifier-name{tag}"] = [name_caption(names[i]) for i in P.argmax(1)]
            if cpipe is fb_pipe:
                bounds.update(_class_name_bounds(P, names, samples))
                idx, _ = retrieve(to_text_space(broad, Xc, banks["default"].dim), banks["default"], 1)
                cands[f"classifier-name, else paired-broad / default{tag}"] = with_fallback(
                    P, names, [banks["default"].texts[i[0]] for i in idx])
                bounds.update(_alternatives(Qc, banks["default"], samples))
        for c, caps in cands.items():
            rows.append({"candidate": c, "dataset": dname, "n": len(samples),
                         "subject_named": round(_rate(caps, samples, subject_extra), 4)})
        for c, v in bounds.items():
            rows.append({"candidate": f"{c} ({fb_pipe.image_encoder})", "dataset": dname, "n": len(samples),
                         "subject_named": round(v, 4), "bound": True})
        samples_out[dname] = [{"id": s.id, "label": s.label, **{c: cands[c][i] for c in cands}}
                              for i, s in enumerate(samples[:samples_per_set])]
    return {"split": split, "bank_sizes": {k: len(v) for k, v in banks.items()}, "bank_build_s": round(bank_s, 1),
            "paired_broad_pairs": broad_n, "fallback_below": FALLBACK_BELOW,
            "rows": rows, "samples": samples_out, "loadavg": os.getloadavg()}


def table(res: dict) -> str:
    cands = list(dict.fromkeys(r["candidate"] for r in res["rows"]))
    dsets = list(dict.fromkeys(r["dataset"] for r in res["rows"]))
    get = {(r["candidate"], r["dataset"]): r for r in res["rows"]}
    head = "| candidate | " + " | ".join(f"{d} (n={get[(cands[0], d)]['n']})" for d in dsets) + " | mean |"
    lines = [head, "|---" * (len(dsets) + 2) + "|"]
    for c in cands:
        v = [get[(c, d)]["subject_named"] for d in dsets]
        lines.append(f"| {c} | " + " | ".join(f"{x:.3f}" for x in v) + f" | {np.mean(v):.3f} |")
    return "\n".join(lines)


@click.command("photos-val", help=__doc__)
@click.option("--split", default="val", show_default=True, type=click.Choice(["val", "train"]),
              help="test is held out: not offered")
@click.option("--bank-limit", type=int, default=None)
@click.option("--samples", type=int, default=8, show_default=True, help="example captions kept per dataset")
@click.option("--no-decoder", is_flag=True,
              help="skip the rotations' decoded captions (the decoder trains on first use: minutes)")
@click.option("--json", "as_json", is_flag=True)
@click.option("--out", default=None, help="also write the JSON here")
def cli(split, bank_limit, samples, no_decoder, as_json, out):
    res = evaluate(split, bank_limit, samples_per_set=samples, decoder=not no_decoder)
    if out:
        with open(out, "w") as f:
            json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1) if as_json else table(res))
    print(f"bank sizes {res['bank_sizes']}; load average {res['loadavg']}", file=sys.stderr)
