"""Zero-shot labels for the JEPA world's attributes, from text alone.

Each value of an attribute (colour red, size big, column left, ...) is the mean of the caption bank's
captions that name it (read with the world's own words, ``captioner.world.scenes.read_caption``), each
centred on the bank's mean as the rotated renders are: the value in the context of whatever else the bank's
captions say, which averages out over the bank. Without a bank, or for a value no bank caption names, the
mean of short prompts that name the value alone ("a red disc", "a crimson dot", "a disc on the left", ...;
:func:`prompts`). ``HEADS`` says which; ``captioner world report``, ``captioner eval zeroshot --dataset world``
and ``captioner classify --world`` all read these heads.
"""
from __future__ import annotations

import numpy as np

from captioner.errors import CaptionerError

ATTRIBUTES = ("colour", "size", "col", "row", "background")


def prompts() -> dict:
    """attribute -> [(value, [prompt, ...]), ...]: e.g. colour red -> "a red disc", "a crimson dot", ...;
    column left -> "a disc on the left", ..."""
    from captioner.world import scenes as W

    out = {}
    for attr in ATTRIBUTES:
        rows = []
        for value, (_, syn) in W.VALUE_WORDS[attr].items():
            if attr in ("colour", "size"):
                rows.append((value, [f"a {w} {n}" for w in syn for n in W.NOUNS]))
            else:
                rows.append((value, [f"a {n} {w}" for w in syn for n in W.NOUNS]))
        out[attr] = rows
    return out


def attribute_labels(dataset) -> dict:
    """attribute -> (N,) the value of each sample's scene (from its label, the scene key)."""
    from captioner.world import scenes as W

    index = {sc.key(): sc for sc in W.all_scenes()}
    return {a: np.array([getattr(index[s.label], a) for s in dataset.samples]) for a in ATTRIBUTES}


def check_attribute(name: str) -> str:
    """``name`` (``world:colour`` or ``colour``) as an attribute, or a one-line error listing them."""
    attr = name.split(":", 1)[1] if name.startswith("world:") else name
    if attr not in ATTRIBUTES:
        raise CaptionerError(f"the world has no attribute {name!r}; choose one of {', '.join(ATTRIBUTES)}")
    return attr


# zero-shot with class prototypes from the unlabelled train renders (captioner.zeroshot.class_prototypes): the
# weight of the prototypes' cosine, chosen on the val renders of seeds 0-2 (docs/results/world.md)
PROTOTYPE_WEIGHT = 1.0


# what a value's vector is made of: "bank" (the bank's captions that name the value) or "prompts" (short prompts
# that name the value alone). Chosen on the val renders of seeds 0-2 (`--scenes train` text JEPAs, paired and
# lattice maps alike): "prompts" gave a mean top-1 of 0.994 / 0.978 / 0.963 (seed 2's background 0.820), "bank"
# 1.000 on every attribute of every seed. A text JEPA trained on whole captions puts a phrase that names one
# attribute alone where its training never put a caption; the bank's captions are what it was trained on.
HEADS = "bank"


def attribute_head(encode, attribute: str, mu: np.ndarray, bank=None) -> tuple[list[str], np.ndarray]:
    """(values, (C, D) unit class vectors) of ``attribute``; ``encode`` embeds texts, ``mu`` is the bank's mean
    (of unit rows) that every vector is centred on. With ``bank`` = (texts, E: their unit embeddings) and
    ``HEADS`` "bank", a value's vector is the mean of the bank captions that name it; a value no bank caption
    names (and every value without a bank) takes its :func:`prompts`."""
    from captioner.bank import l2n
    from captioner.world.scenes import read_caption
    from captioner.zeroshot import head_from_embeddings

    attr = check_attribute(attribute)
    rows = prompts()[attr]
    named = {}
    if bank is not None and HEADS == "bank":
        texts, E = bank
        E = np.asarray(E, np.float32)
        for i, t in enumerate(texts):
            named.setdefault(read_caption(t)[attr], []).append(i)
    need = [p for v, ps in rows if v not in named for p in ps]
    P = l2n(np.asarray(encode(need), np.float32)) if need else None
    parts, counts, k = [], [], 0
    for v, ps in rows:
        if v in named:
            parts.append(E[named[v]])
        else:
            parts.append(P[k:k + len(ps)])
            k += len(ps)
        counts.append(len(parts[-1]))
    return [v for v, _ in rows], head_from_embeddings(l2n(np.vstack(parts) - mu), counts)


def _state(pipe) -> dict:
    """What this module keeps on a world pipeline: its attribute heads and calibrated scales."""
    return pipe.__dict__.setdefault("_world_zeroshot", {"heads": None, "scales": {}})


def heads(pipe) -> dict:
    """attribute -> :func:`attribute_head` for a world pipeline (its text encoder, its bank), built once."""
    state = _state(pipe)
    if state["heads"] is None:
        bank = pipe.bank()
        mu = bank.centered()[0]
        state["heads"] = {a: attribute_head(pipe.encoder("text").encode, a, mu, (bank.texts, bank.E))
                          for a in ATTRIBUTES}
    return state["heads"]


def classifier(pipe, attribute: str, rotation: str = "paired", calibrated: bool = True):
    """A ``captioner.zeroshot.ZeroShotClassifier`` of ``attribute`` for a world pipeline
    (``captioner.world.demo.world_pipeline``) through its map ``rotation``; with ``calibrated`` its logit scale
    is :func:`calibrated_scale`'s (else CLIP's 100, which on 12-d unit vectors gives 1.000 / 0.000)."""
    from captioner.zeroshot import DEFAULT_LOGIT_SCALE, ZeroShotClassifier

    labels, W = heads(pipe)[check_attribute(attribute)]
    scale = calibrated_scale(pipe, rotation) if calibrated else DEFAULT_LOGIT_SCALE
    return ZeroShotClassifier(labels, W, pipe.serving_rotation(rotation), mu=pipe.bank().centered()[0],
                              logit_scale=scale)


def calibrated_scale(pipe, rotation: str) -> float:
    """The logit scale of softmax(scale * cos) minimising the negative log-likelihood of the true values of all
    five attributes together, on the world's val renders (``pipe.world_seed``'s split; never test), through
    ``rotation``. Kept on the pipeline per rotation (128 renders: a fraction of a second)."""
    from captioner.calibration import fit_logit_scale

    scales = _state(pipe)["scales"]
    if rotation not in scales:
        scales[rotation] = fit_logit_scale(*val_cosines(pipe, rotation))
    return scales[rotation]


def val_cosines(pipe, rotation: str) -> tuple[np.ndarray, np.ndarray]:
    """(C (5 N, width) cosines of the val renders to every attribute's values, y (5 N,) the true values): one
    block per attribute, classes padded with a cosine of -1000 that no scale can pick."""
    from captioner.bank import l2n
    from captioner.datasets import get_dataset

    val = get_dataset("world", "val", seed=getattr(pipe, "world_seed", 0))
    Q = l2n(np.asarray(pipe.serving_rotation(rotation).transform(pipe.encode_images(
        [s.source() for s in val.samples])), np.float32) - pipe.bank().centered()[0])
    truth = attribute_labels(val)
    width = max(len(labels) for labels, _ in heads(pipe).values())
    C, y = [], []
    for attr, (labels, W) in heads(pipe).items():
        c = np.full((len(Q), width), -1e3)
        c[:, :len(labels)] = Q @ W.T
        C.append(c)
        y += [labels.index(v) for v in truth[attr]]
    return np.vstack(C), np.array(y)
