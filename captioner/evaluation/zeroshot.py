"""Zero-shot accuracy (top-1, top-5) on the embedded Tux Paint categories or ImageNet-100 folders.

Modes:

- ``paired``: the Procrustes rotation fitted on Tux Paint train pairs, then cosine against the class head;
- ``pairfree``: the rotation from the pair-free matcher (no image-text pair anywhere);
- ``head``: the rotation from pseudo-pairs of the image encoder's classifier head (no image-text pair from
  the data; the head's ImageNet class names are the only link);
- ``cluster``: no rotation either: k-means on the evaluated images, clusters matched to classes by the
  quadratic-assignment solver on the two similarity structures (the Blind Match setting);
- ``ridge`` / ``random``: the least-squares reference and the random floor.

Class vectors: the mean over the 80 ImageNet templates of each class's normalised prompt embeddings,
renormalised; for ImageNet-100 the WordNet definitions can be added (``prompts="both"``); for Tux Paint the
train split's captions of each category (``prompts="captions"``: text only, test captions excluded;
``captioner.zeroshot.described_by_captions``).
"""
from __future__ import annotations

import time

import numpy as np

from captioner.errors import CaptionerError
from captioner.rotations import ALL as ROTATIONS

MODES = (*ROTATIONS, "cluster")  # every rotation kind, and cluster (no rotation)


def topk_accuracy(scores: np.ndarray, y: np.ndarray, ks=(1, 5)) -> dict:
    """Fraction of rows whose true class is among the k best-scored (ties: lower index first).

    scores : (N, C); y : (N,) int class indices. Returns {"top1": .., "top5": ..}."""
    from captioner.zeroshot import topk

    scores = np.asarray(scores)
    y = np.asarray(y)
    out = {}
    for k in ks:
        top = topk(scores, k)
        out[f"top{k}"] = float((top == y[:, None]).any(1).mean()) if len(y) else float("nan")
    return out


def zeroshot_set(dataset: str, root=None, split: str | None = None):
    """(CaptionDataset, labels, prompt names, definitions or None) for an evaluation set."""
    from captioner.datasets import get_dataset

    if dataset == "tuxpaint":
        from captioner.zeroshot import TUXPAINT_CLASSNAMES

        ds = get_dataset("tuxpaint", split=split or "test", root=root) if root else \
            get_dataset("tuxpaint", split=split or "test")
        labels = list(ds.labels)
        return ds, labels, [TUXPAINT_CLASSNAMES.get(c, c) for c in labels], None
    if dataset == "imagenet100":
        from captioner.assets import synset_definitions
        from captioner.datasets import imagenet100_classes

        if root is None:
            raise CaptionerError("imagenet100 needs --root DIR holding <split>/<wnid>/*.JPEG folders")
        ds = get_dataset("imagenet100", split=split or "val", root=root)
        classes = imagenet100_classes()
        try:
            defs = synset_definitions()
            definitions = [defs.get(w) for w, _ in classes]
        except CaptionerError:
            definitions = None
        names = [n for _, n in classes]
        return ds, names, names, definitions
    raise CaptionerError(f"unknown zero-shot dataset {dataset!r}; choose tuxpaint or imagenet100")


def evaluate_zeroshot(pipe, dataset: str = "tuxpaint", mode: str = "paired", root=None, split: str | None = None,
                      prompts: str = "templates", seed: int = 0, prototypes: bool = False) -> dict:
    """Zero-shot top-1 / top-5 of ``pipe``'s encoders on ``dataset`` under ``mode``.

    Returns a dict with top1, top5, chance_top1, chance_top5, n_images, n_classes, mode, dataset, prompts,
    seconds (and the cluster-to-class permutation in cluster mode).

    ``prototypes``: add class prototypes in image space found on the pipeline's unlabelled train images
    (``captioner.zeroshot.PrototypeClassifier``; no label, no caption is read).
    """
    from captioner.cache import embed
    from captioner.zeroshot import ZeroShotClassifier, check_labels, cluster_match

    if mode not in MODES:
        raise CaptionerError(f"unknown zero-shot mode {mode!r}; choose one of {', '.join(MODES)}")
    if mode == "cluster" and prototypes:
        raise CaptionerError("prototypes need a rotation; cluster mode has none")
    if prompts == "captions" and dataset != "tuxpaint":
        raise CaptionerError("prompts='captions' needs a dataset whose train captions carry its labels: tuxpaint")
    t0 = time.time()
    ds, labels, names, definitions = zeroshot_set(dataset, root, split)
    labels = check_labels(labels)
    index = {c: i for i, c in enumerate(labels)}
    xs = embed(pipe.encoder("image"), ds, "image", progress=pipe.progress)
    label_of = {s.id: s.label for s in ds.samples}
    keep = [i for i, sid in enumerate(xs.sample_ids) if label_of.get(sid) in index]
    if not keep:
        raise CaptionerError(f"{ds.name}/{ds.split}: no images left with a known label")
    X = xs.X[keep]
    y = np.array([index[label_of[xs.sample_ids[i]]] for i in keep])
    from captioner.assets import templates as load_templates

    if prompts == "captions":
        from captioner.zeroshot import described_by_captions

        W = described_by_captions(pipe.head(names, templates=load_templates("imagenet1k")), labels,
                                  pipe.train_set.samples, pipe.bank())
    else:
        W = pipe.head(names, templates=load_templates("imagenet1k"), definitions=definitions, mode=prompts)
    out = {"dataset": ds.name, "split": ds.split, "mode": mode, "prompts": prompts, "n_images": int(len(y)),
           "n_classes": len(labels), "n_skipped": int(xs.meta.get("n_skipped", 0)) + len(ds.skipped),
           "image_encoder": pipe.image_encoder, "text_encoder": pipe.text_encoder}
    if mode == "cluster":
        res = cluster_match(X, W, seed=seed)
        scores = res["scores"]
        out["perm"] = res["perm"].tolist()
        out["qap_objective"] = res["objective"]
        out["pairing"] = "none (k-means clusters matched to classes by QAP)"
    else:
        from captioner.rotations import get_kind

        clf = ZeroShotClassifier(labels, W, pipe.rotation(mode), mu=pipe.bank().centered()[0])
        out["pairing"] = get_kind(mode).pairing
        if prototypes:
            from captioner.zeroshot import PrototypeClassifier

            pool = pipe.train_images()
            clf = PrototypeClassifier(clf, pool)
            out["pairing"] += (f"; class prototypes from {pipe.train_set.name}/{pipe.train_set.split}'s images, "
                               "unlabelled")
            out["prototypes"] = {"weight": clf.weight, "pool": int(len(pool))}
        scores = clf.predict_proba(X)
    out.update(topk_accuracy(scores, y))
    C = len(labels)
    out["chance_top1"] = 1.0 / C
    out["chance_top5"] = min(5, C) / C
    # the majority-class rate: with Tux Paint's imbalanced categories this, not 1/C, is the bar to clear
    out["majority_top1"] = float(np.bincount(y, minlength=C).max() / len(y))
    out["seconds"] = round(time.time() - t0, 2)
    return out


def evaluate_world_zeroshot(pipe, mode: str = "paired", split: str = "test", seed: int = 0,
                            prototypes: bool = False) -> list[dict]:
    """Zero-shot top-1 / top-5 of each attribute (colour, size, column, row, background) of the JEPA world's
    ``split`` renders, through ``pipe`` (``captioner.world.demo.world_pipeline``) and its rotation ``mode``:
    each value's class vector is the mean of its prompts from the world's words
    (``captioner.world.zeroshot``), centred on the bank's mean as in ``python -m eval world report``. One row an
    attribute, in :func:`evaluate_zeroshot`'s format."""
    from captioner.cache import embed
    from captioner.datasets import get_dataset
    from captioner.rotations import get_kind
    from captioner.world.zeroshot import ATTRIBUTES, attribute_labels, classifier

    if mode not in ROTATIONS:
        raise CaptionerError(f"zero-shot mode {mode!r} is not offered on the world; choose one of "
                             f"{', '.join(ROTATIONS)}")
    t0 = time.time()
    ds = get_dataset("world", split, seed=seed)
    xs = embed(pipe.encoder("image"), ds, "image", progress=pipe.progress)
    order = {sid: i for i, sid in enumerate(xs.sample_ids)}
    X = xs.X[[order[s.id] for s in ds.samples]]
    truth = attribute_labels(ds)
    if prototypes:
        from captioner.world.zeroshot import PROTOTYPE_WEIGHT
        from captioner.zeroshot import PrototypeClassifier

        pool = embed(pipe.encoder("image"), get_dataset("world", "train", seed=seed), "image").X
    rows = []
    for attr in ATTRIBUTES:
        clf = classifier(pipe, attr, mode, calibrated=False)   # top-k: the scale changes no ranking
        if prototypes:
            clf = PrototypeClassifier(clf, pool, weight=PROTOTYPE_WEIGHT)
        labels = clf.labels
        scores = clf.predict_proba(X)
        y = np.array([labels.index(v) for v in truth[attr]])
        C = len(labels)
        rows.append({"dataset": f"world:{attr}", "split": ds.split, "mode": mode, "prompts": "world words",
                     "n_images": int(len(y)), "n_classes": C, "attribute": attr, **topk_accuracy(scores, y),
                     "chance_top1": 1.0 / C, "chance_top5": min(5, C) / C,
                     "majority_top1": float(np.bincount(y, minlength=C).max() / len(y)),
                     "image_encoder": pipe.image_encoder, "text_encoder": pipe.text_encoder,
                     "pairing": get_kind(mode).pairing, "seconds": round(time.time() - t0, 2),
                     **({"prototypes": {"weight": clf.weight, "pool": int(len(pool))}} if prototypes else {})})
    return rows


def format_table(rows: list[dict]) -> str:
    head = ["dataset", "mode", "top-1 %", "top-5 %", "chance top-1 %", "majority %", "classes", "images"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        lines.append("| " + " | ".join([
            f"{r['dataset']}/{r['split']}", r["mode"] + (" + prototypes" if r.get("prototypes") else ""),
            f"{100 * r['top1']:.1f}", f"{100 * r['top5']:.1f}",
            f"{100 * r['chance_top1']:.1f}", f"{100 * r['majority_top1']:.1f}", str(r["n_classes"]),
            str(r["n_images"])]) + " |")
    return "\n".join(lines)
