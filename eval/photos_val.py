"""Which rotation, bank and captioner names the subject of everyday photos? (issue 20's measurement)

For every candidate: the share of validation photos (GCompris val, openclipart val; never the held-out test
splits) whose caption names the photo's subject (``captioner.subject.names_subject``: the label, its
synonyms, or a WordNet hypernym up to two levels).

Candidates:
- ``<rotation> / <bank>``: rotate the image embedding with ``paired`` / ``head`` / ``pairfree`` (fitted on
  Tux Paint train as in the pipeline) and take the top-1 retrieved caption of the ``tuxpaint`` bank (369 train
  captions) or the ``default`` broad bank (``captioner.bank.bank_sets("default")``);
- ``classifier / <bank>``: no rotation: the image encoder's own ImageNet classifier head gives class
  probabilities p; the text query is sum_c p_c t_c over the class-name prompt embeddings t_c, and the top-1
  bank caption by cosine is the caption (text-to-text retrieval; no image-caption pair anywhere);
- ``classifier-name``: the top-1 ImageNet class name itself.

The classifier candidates are measured with the classifier head of each of EfficientNet-Lite0 (the rotations'
image encoder), -Lite1 and -Lite2, tagged with the encoder's name; the rotation candidates use Lite0.

    python -m eval.photos_val [--split val] [--bank-limit N] [--json] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np


def _rate(caps, samples, extra_of) -> float:
    from captioner.subject import names_subject

    hits = [names_subject(c, s.label, extra_of(s.label)) for c, s in zip(caps, samples)]
    return float(np.mean(hits)) if hits else float("nan")


def text_retrieve_top1(Q: np.ndarray, bank) -> list[str]:
    """Top-1 bank caption by plain cosine (queries already in text space, no centring)."""
    from captioner.bank import l2n

    S = l2n(Q) @ bank.E.T
    return [bank.texts[i] for i in S.argmax(1)]


def _rows(es, sample_ids) -> np.ndarray:
    """The rows of an embedding set in the order of ``sample_ids`` (another encoder's set of one dataset)."""
    pos = {s: i for i, s in enumerate(es.sample_ids)}
    missing = [s for s in sample_ids if s not in pos]
    if missing:
        raise SystemExit(f"photos_val: {len(missing)} image(s) embedded by one encoder but not another "
                         f"(first: {missing[0]}); rerun to retry them")
    return es.X[[pos[s] for s in sample_ids]]


def evaluate(split: str = "val", bank_limit: int | None = None, rotations=("paired", "head", "pairfree"),
             samples_per_set: int | None = None,
             classifier_encoders=("efficientnet-lite1", "efficientnet-lite2")) -> dict:
    from captioner.bank import bank_sets, build_bank
    from captioner.cache import embed
    from captioner.datasets import get_dataset
    from captioner.photocaption import classifier_queries
    from captioner.photosets import subject_extra
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
    rows, samples_out = [], {}
    for dname, ds in sets.items():
        es = embed(pipe.encoder("image"), ds, "image")
        by_id = {s.id: s for s in ds.samples}
        samples = [by_id[i] for i in es.sample_ids]
        X = es.X
        cands = {}
        for r in rotations:
            for bname, bank in banks.items():
                Q = to_text_space(pipe.serving_rotation(r), X, bank.dim)
                idx, _ = retrieve(Q, bank, 1)
                cands[f"{r} / {bname}"] = [bank.texts[i[0]] for i in idx]
        for cpipe in (pipe, *extra_pipes):  # the classifier head of each image encoder compared
            tag = f" ({cpipe.image_encoder})"
            Xc = X if cpipe is pipe else _rows(embed(cpipe.encoder("image"), ds, "image"), es.sample_ids)
            Qc, names, P = classifier_queries(cpipe, Xc)
            for bname, bank in banks.items():
                cands[f"classifier / {bname}{tag}"] = text_retrieve_top1(Qc, bank)
            cands[f"classifier-name{tag}"] = [f"a photo of a {names[i]}." for i in P.argmax(1)]
        for c, caps in cands.items():
            rows.append({"candidate": c, "dataset": dname, "n": len(samples),
                         "subject_named": round(_rate(caps, samples, subject_extra), 4)})
        samples_out[dname] = [{"id": s.id, "label": s.label, **{c: cands[c][i] for c in cands}}
                              for i, s in enumerate(samples[:samples_per_set])]
    return {"split": split, "bank_sizes": {k: len(v) for k, v in banks.items()}, "bank_build_s": round(bank_s, 1),
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="val", choices=["val", "train"], help="test is held out: not offered")
    ap.add_argument("--bank-limit", type=int, default=None)
    ap.add_argument("--samples", type=int, default=8, help="example captions kept per dataset")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    a = ap.parse_args(argv)
    res = evaluate(a.split, a.bank_limit, samples_per_set=a.samples)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1) if a.json else table(res))
    print(f"bank sizes {res['bank_sizes']}; load average {res['loadavg']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
