"""``captioner caption`` and ``captioner classify``: captions and zero-shot labels for image files."""
from __future__ import annotations

import json

import click

from captioner.errors import BadImageError, CaptionerError


def _common(f):
    from captioner.rotations import ALL, KINDS

    f = click.option("--rotation", "-r", type=click.Choice(ALL), default="paired", show_default=True,
                     help="; ".join(f"{k}: {v.label}" for k, v in KINDS.items()) + ".")(f)
    f = click.option("--rotation-file", type=click.Path(), default=None,
                     help="A saved map (`captioner align fit`) to use as --rotation; refused if fitted for "
                          "other encoders.")(f)
    f = click.option("--image-encoder", default="efficientnet-lite0", show_default=True)(f)
    f = click.option("--text-encoder", default="minilm-l6", show_default=True)(f)
    f = click.option("--device", default="cpu", show_default=True)(f)
    f = click.option("--top-k", "-k", default=5, show_default=True, type=click.IntRange(1, 100))(f)
    f = click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")(f)
    f = click.option("--quiet", "-q", is_flag=True, help="No progress output while building.")(f)
    return f


def load_images(paths) -> tuple[list, list, list]:
    """Decode image files; bad ones are skipped with a one-line warning. Raises when none is left."""
    from captioner.images import load_image

    ims, ok, bad = [], [], []
    for p in paths:
        try:
            ims.append(load_image(p))
            ok.append(str(p))
        except BadImageError as e:
            bad.append(str(e))
            click.echo(f"warning: skipped {e}", err=True)
    if not ims:
        raise CaptionerError(f"no images left after skipping {len(bad)} bad file(s)"
                             + (f" (first: {bad[0]})" if bad else ""))
    return ims, ok, bad


def _pipeline(image_encoder, text_encoder, device, rotation, rotation_file, quiet):
    from captioner.pipeline import Pipeline

    kw = {"image_encoder": image_encoder, "text_encoder": text_encoder, "device": device, "progress": not quiet}
    if rotation_file:
        kw["rotation_files"] = {rotation: rotation_file}
    return Pipeline.default(**kw)


@click.command("caption")
@click.argument("images", nargs=-1, required=True, type=click.Path())
@_common
@click.option("--no-decode", is_flag=True, help="Caption = the top retrieved bank caption (no decoder).")
def caption_cli(images, rotation, rotation_file, image_encoder, text_encoder, device, top_k, as_json, quiet,
                no_decode):
    """Caption image files: the decoded caption and the top-k retrieved bank captions with scores.

    The first run builds and caches the caption bank, the rotation and the decoder under $CAPTIONER_HOME
    (a few minutes on a laptop CPU); a later call takes about 0.7 s for one image on 2 idle cores, most of
    it starting Python and loading models, plus tens of milliseconds per further image (docs/performance.md)."""
    ims, ok, bad = load_images(images)
    pipe = _pipeline(image_encoder, text_encoder, device, rotation, rotation_file, quiet)
    res = pipe.caption(ims, top_k=top_k, rotation=rotation, decode=not no_decode)
    rows = [{"image": p, **r} for p, r in zip(ok, res)]
    if as_json:
        click.echo(json.dumps({"rotation": rotation, "results": rows, "skipped": bad}, indent=2))
        return
    for r in rows:
        click.echo(f"{r['image']}: {r['caption']}")
        for j, c in enumerate(r["retrieved"], 1):
            click.echo(f"  {j}. {c['score']:+.3f}  {c['caption']}")


def named_label_set(name: str) -> tuple[list[str], list[str]]:
    """(labels, prompt names) of a named label set: tuxpaint (its categories), imagenet100, or any
    clip-benchmark set (imagenet1k, cifar10, ...)."""
    if name == "tuxpaint":
        from captioner.datasets import get_dataset
        from captioner.zeroshot import TUXPAINT_CLASSNAMES

        labels = get_dataset("tuxpaint", split="test").labels
        return labels, [TUXPAINT_CLASSNAMES.get(c, c) for c in labels]
    if name == "imagenet100":
        from captioner.datasets import imagenet100_classes

        names = [n for _, n in imagenet100_classes()]
        return names, names
    from captioner.assets import classnames

    names = classnames(name)
    # imagenet1k names two classes each "missile" and "sunglasses": keep both, told apart by WordNet id
    # (the prompts stay the plain name, so their scores tie, as the two classes are the same words)
    tags = None
    if name == "imagenet1k":
        from captioner.assets import imagenet_synsets

        tags = imagenet_synsets()
    seen: set = set()
    labels = []
    for i, n in enumerate(names):
        lab = n
        if n.lower() in seen:
            lab = f"{n} ({tags[i] if tags else i})"
        seen.add(lab.lower())
        labels.append(lab)
    return labels, names


@click.command("classify")
@click.argument("images", nargs=-1, required=True, type=click.Path())
@click.option("--labels", "-l", default=None, help="Comma-separated class names, e.g. 'cat,dog,fire truck'.")
@click.option("--label-set", default=None,
              help="A named label set instead: tuxpaint, imagenet100, imagenet1k, cifar10, ... (clip-benchmark).")
@_common
def classify_cli(images, labels, label_set, rotation, rotation_file, image_encoder, text_encoder, device, top_k,
                 as_json, quiet):
    """Classify image files zero-shot among --labels (or a --label-set): each class is the mean of its 80
    prompt embeddings ("a photo of a {c}." ...), each image is rotated into text space and scored."""
    from captioner.zeroshot import check_labels

    if bool(labels) == bool(label_set):
        raise click.UsageError("give exactly one of --labels or --label-set")
    if labels:
        names = check_labels(labels.split(","))
        prompts = names
    else:
        names, prompts = named_label_set(label_set)
        names = check_labels(names)
    ims, ok, bad = load_images(images)
    pipe = _pipeline(image_encoder, text_encoder, device, rotation, rotation_file, quiet)
    top_k = min(top_k, len(names))
    if prompts == names:
        res = pipe.classify(ims, names, top_k=top_k, rotation=rotation)
    else:
        res = _classify_with_prompts(pipe, ims, names, prompts, top_k, rotation)
    rows = [{"image": p, **r} for p, r in zip(ok, res)]
    if as_json:
        click.echo(json.dumps({"rotation": rotation, "n_classes": len(names), "results": rows, "skipped": bad},
                              indent=2))
        return
    for r in rows:
        best = r["labels"][0]
        click.echo(f"{r['image']}: {best['label']} ({best['prob']:.3f})")
        for c in r["labels"][1:]:
            click.echo(f"    {c['label']} ({c['prob']:.3f})")


def _classify_with_prompts(pipe, ims, names, prompts, top_k, rotation):
    """Like Pipeline.classify, with prompt words that differ from the label names (Tux Paint categories)."""
    import time

    from captioner.zeroshot import topk

    clf = pipe.classifier(names, rotation, prompt_names=prompts)
    t0 = time.perf_counter()
    X = pipe.encode_images(ims)
    t_enc = (time.perf_counter() - t0) * 1000 / len(X)
    t0 = time.perf_counter()
    P = clf.predict_proba(X)
    t_cls = (time.perf_counter() - t0) * 1000 / len(X)
    top = topk(P, top_k)
    return [{"labels": [{"label": names[j], "prob": float(P[i, j])} for j in top[i]],
             "timings_ms": {"encode": round(t_enc, 2), "rotate_retrieve": round(t_cls, 2)}} for i in range(len(X))]
