"""``captioner caption`` and ``captioner classify``: captions and zero-shot labels for image files."""
from __future__ import annotations

import json

import click

from captioner.captioners import captioner_names, help_text
from captioner.errors import BadImageError, CaptionerError


def _common(f):
    from captioner.rotations import ALL, KINDS

    f = click.option("--rotation", "-r", type=click.Choice(ALL), default=None,
                     help="; ".join(f"{k}: {v.label}" for k, v in KINDS.items())
                     + " (default: paired; classify: head where the image encoder has a classifier head).")(f)
    f = click.option("--rotation-file", type=click.Path(), default=None,
                     help="A saved map (`captioner align fit`) to use as --rotation; refused if fitted for "
                          "other encoders.")(f)
    f = click.option("--image-encoder", default=None,
                     help="[default: efficientnet-lite1 for the classifier captioner (it named the subject of "
                          "the validation photos most often, docs/results/captions.md), else efficientnet-lite0]")(f)
    f = click.option("--text-encoder", default="minilm-l6", show_default=True)(f)
    f = click.option("--device", default="cpu", show_default=True)(f)
    f = click.option("--top-k", "-k", default=5, show_default=True, type=click.IntRange(1, 100))(f)
    f = click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")(f)
    f = click.option("--quiet", "-q", is_flag=True, help="No progress output while building.")(f)
    f = click.option("--world", "world_seed", type=int, default=None, metavar="SEED",
                     help="Use the JEPA world of this seed (`captioner world train`): its image and text JEPAs, its "
                          "train captions as the bank, the lattice matcher's pair-free map; replaces the encoder "
                          "and bank options.")(f)
    f = click.option("--world-preset", default=None, help="With --world: the trained world's preset (default: lab, "
                     "else whichever is trained for the seed).")(f)
    return f


def _world_pipeline(seed: int, preset: str | None, rotation_file, quiet: bool, bank=None):
    """The world's pipeline for ``--world SEED`` (refusing the options it replaces)."""
    if rotation_file:
        raise click.UsageError("--rotation-file does not go with --world (the world fits its own maps)")
    if bank not in (None, "train"):
        raise click.UsageError("--bank does not go with --world (its bank is the world's train captions)")
    from captioner.world.demo import world_pipeline

    return world_pipeline(preset, seed, progress=not quiet)


DEFAULT_IMAGE_ENCODER = "efficientnet-lite0"  # the rotations' and zero-shot's image encoder
SKIPPED_EXIT = 3  # exit status when any image file was skipped (the others are still printed)


def load_images(paths) -> tuple[list, list, list]:
    """Decode image files; each bad one is skipped with one warning line. Raises when none is left."""
    from captioner.images import load_image

    ims, ok, bad = [], [], []
    for p in paths:
        try:
            ims.append(load_image(p))
            ok.append(str(p))
        except BadImageError as e:
            reason = e.reason.replace("; check the path or the dataset root", "; check the path")
            bad.append(f"{e.path}: {reason}")
            click.echo(f"warning: skipped {bad[-1]}", err=True)
    if not ims:
        raise CaptionerError(f"no images left: all {len(bad)} file(s) were skipped (see the warnings above)")
    return ims, ok, bad


def _done(bad: list) -> None:
    """Exit with ``SKIPPED_EXIT`` when any file was skipped (its warning was printed once already)."""
    if bad:
        raise SystemExit(SKIPPED_EXIT)


def _pipeline(image_encoder, text_encoder, device, rotation, rotation_file, quiet, bank=None, bank_limit=None):
    from captioner.pipeline import Pipeline

    kw = {"image_encoder": image_encoder, "text_encoder": text_encoder, "device": device, "progress": not quiet}
    if rotation_file:
        kw["rotation_files"] = {rotation: rotation_file}
    if bank not in (None, "train"):
        kw.update(bank=bank, bank_limit=bank_limit)
    return Pipeline.default(**kw)


def _resolve(captioner, rotation, no_decode, pipe_has_head) -> tuple[str, str]:
    """(captioner, rotation): an explicit --captioner wins; --rotation alone means retrieval through it (plus
    the decoder unless --no-decode); nothing means the classifier captioner (or paired retrieval for an image
    encoder without a classifier head)."""
    if captioner is None:
        if rotation is not None:
            captioner = "retrieval" if no_decode else "decoder"
        else:
            captioner = "classifier" if pipe_has_head else "retrieval"
    if captioner == "classifier" and rotation is not None:
        raise click.UsageError("--rotation does not apply to --captioner classifier (it uses no rotation)")
    return captioner, rotation or "paired"


@click.command("caption")
@click.argument("images", nargs=-1, required=True, type=click.Path())
@_common
@click.option("--captioner", "-c", type=click.Choice(captioner_names()), default=None,
              help="(default: classifier where the image encoder has a head) " + help_text())
@click.option("--no-decode", is_flag=True, help="With --rotation: caption = the top retrieved caption (no decoder).")
@click.option("--bank", default=None,
              help="Captions to retrieve from: default (ImageNet names, CuPL, WordNet glosses, emoji, Tux Paint, "
                   "openclipart; the classifier's default), train (Tux Paint train; the rotations' default), a "
                   "dataset name, or a text file with one caption per line.")
@click.option("--bank-limit", type=click.IntRange(1), default=None, help="Keep the first N bank captions.")
def caption_cli(images, rotation, rotation_file, image_encoder, text_encoder, device, top_k, as_json, quiet,
                world_seed, world_preset, captioner, no_decode, bank, bank_limit):
    """Caption image files: the caption and the top-k retrieved bank captions with scores.

    The first run embeds the caption bank into $CAPTIONER_HOME (about 7,000 captions; `make eval` builds it
    ahead); a later one-image call takes about 1 s on 2 lightly loaded cores (docs/performance.md), plus tens
    of milliseconds per further image. --captioner decoder trains a decoder on first use (minutes).
    With --world SEED: a render of the JEPA world captioned by the world's decoder (reading the rotated
    render) unless --captioner says otherwise.

    Exit status 3 when any image file was skipped (the others are still captioned)."""
    if world_seed is not None:
        return _caption_world(images, rotation, rotation_file, top_k, as_json, quiet, world_seed, world_preset,
                              captioner, no_decode, bank)
    from captioner.encoders import get_encoder
    from captioner.encoders.heads import has_classifier_head
    from captioner.photocaption import CLASSIFIER_ENCODER

    ims, ok, bad = load_images(images)
    head = has_classifier_head(get_encoder(image_encoder or DEFAULT_IMAGE_ENCODER, device=device))
    captioner, rotation_ = _resolve(captioner, rotation, no_decode, head)
    if image_encoder is None:
        image_encoder = CLASSIFIER_ENCODER if captioner == "classifier" else DEFAULT_IMAGE_ENCODER
    if bank is None:
        bank = "default" if captioner == "classifier" else "train"
    pipe = _pipeline(image_encoder, text_encoder, device, rotation_, rotation_file, quiet, bank, bank_limit)
    if captioner == "classifier":
        from captioner.photocaption import classifier_captions

        res = classifier_captions(pipe, ims, top_k=top_k)
    else:
        res = pipe.caption(ims, top_k=top_k, rotation=rotation_, decode=captioner == "decoder")
    _print_captions(ok, res, bad, captioner, None if captioner == "classifier" else rotation_, bank, as_json)


def _caption_world(images, rotation, rotation_file, top_k, as_json, quiet, seed, preset, captioner, no_decode, bank):
    if captioner == "classifier":
        raise click.UsageError("--captioner classifier needs an image encoder with a classifier head; the world's "
                               "image JEPA has none")
    pipe = _world_pipeline(seed, preset, rotation_file, quiet, bank)
    captioner = captioner or ("retrieval" if no_decode else "decoder")
    rotation = rotation or "paired"
    ims, ok, bad = load_images(images)
    res = pipe.caption(ims, top_k=top_k, rotation=rotation, decode=captioner == "decoder")
    _print_captions(ok, res, bad, captioner, rotation, f"world-s{seed} train captions", as_json)


def _print_captions(ok, res, bad, captioner, rotation, bank, as_json):
    from captioner.photocaption import shown_caption

    rows = [{"image": p, **r} for p, r in zip(ok, res)]
    if as_json:
        click.echo(json.dumps({"captioner": captioner, "rotation": rotation,
                               "bank": bank, "results": rows, "skipped": bad,
                               "timings_note": "timings_ms are per image: the batch's time over its images"},
                              indent=2))
    else:
        for r in rows:
            click.echo(f"{r['image']}: {shown_caption(r)}")
            for j, c in enumerate(r["retrieved"], 1):
                click.echo(f"  {j}. {c['score']:+.3f}  {c['caption']}")
    _done(bad)


# Label sets not in clip-benchmark's en_classnames.json (CIFAR-10's classes, Krizhevsky 2009).
CIFAR10 = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
LABEL_SETS_HELP = ("tuxpaint, imagenet100, cifar10, imagenet1k, or another clip-benchmark set (pets, flowers, "
                   "caltech101, country211, ...)")


def named_label_set(name: str) -> tuple[list[str], list[str]]:
    """(labels, prompt names) of a named label set: tuxpaint (its categories), imagenet100, cifar10, or any
    clip-benchmark set (imagenet1k, pets, flowers, ...)."""
    if name == "tuxpaint":
        from captioner.datasets import get_dataset
        from captioner.zeroshot import TUXPAINT_CLASSNAMES

        labels = get_dataset("tuxpaint", split="test").labels
        return labels, [TUXPAINT_CLASSNAMES.get(c, c) for c in labels]
    if name == "imagenet100":
        from captioner.datasets import imagenet100_classes

        names = [n for _, n in imagenet100_classes()]
        return names, names
    if name == "cifar10":
        return list(CIFAR10), list(CIFAR10)
    from captioner.assets import load_json

    known = load_json("clip_benchmark/datasets/en_classnames.json")
    if name not in known:
        raise CaptionerError(f"unknown label set {name!r}; known: tuxpaint, imagenet100, cifar10, "
                             f"{', '.join(sorted(known))}")
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
@click.option("--labels", "-l", default=None,
              help="Class names, comma-separated ('cat,dog,fire truck') or as separate words after the option "
                   "(--labels cat dog car: words that are not image files are taken as more labels).")
@click.option("--label-set", default=None, help=f"A named label set instead: {LABEL_SETS_HELP}.")
@_common
def classify_cli(images, labels, label_set, rotation, rotation_file, image_encoder, text_encoder, device, top_k,
                 as_json, quiet, world_seed, world_preset):
    """Classify image files zero-shot among --labels (or a --label-set): each class is the mean of its 80
    prompt embeddings ("a photo of a {c}." ...), each image is rotated into text space and scored.

    With --world SEED: a render of the JEPA world classified by one attribute, --label-set colour (size,
    col, row, background), each value the mean of its prompts in the world's words.

    Exit status 3 when any image file was skipped (the others are still classified)."""
    from captioner.zeroshot import check_labels
    if world_seed is not None:
        return _classify_world(images, labels, label_set, rotation, rotation_file, top_k, as_json, quiet,
                               world_seed, world_preset)
    if labels is not None and not labels.strip(" ,"):
        raise click.UsageError("--labels is empty: give class names, e.g. --labels cat,dog,car")
    if labels is not None and label_set:
        raise click.UsageError("give either --labels or --label-set, not both")
    if labels is None and not label_set:
        raise click.UsageError("give --labels (e.g. --labels cat,dog,car) or --label-set (e.g. cifar10)")
    if labels:
        images, extra = split_label_words(images)
        names = check_labels([x for x in labels.split(",") if x.strip()] + extra)
        prompts = names
    else:
        names, prompts = named_label_set(label_set)
        names = check_labels(names)
    ims, ok, bad = load_images(images)
    image_encoder = image_encoder or DEFAULT_IMAGE_ENCODER
    rotation = rotation or _default_classify_rotation(image_encoder, device, rotation_file)
    pipe = _pipeline(image_encoder, text_encoder, device, rotation, rotation_file, quiet)
    top_k = min(top_k, len(names))
    if prompts == names:
        res = pipe.classify(ims, names, top_k=top_k, rotation=rotation)
    else:
        res = _classify_with_prompts(pipe, ims, names, prompts, top_k, rotation)
    _print_labels(ok, res, bad, rotation, len(names), as_json)


def _classify_world(images, labels, label_set, rotation, rotation_file, top_k, as_json, quiet, seed, preset):
    from captioner.world.zeroshot import ATTRIBUTES, check_attribute, classifier
    from captioner.zeroshot import topk

    if labels is not None or not label_set:
        raise click.UsageError(f"with --world, classify by one attribute: --label-set {'|'.join(ATTRIBUTES)}")
    attr = check_attribute(label_set)
    pipe = _world_pipeline(seed, preset, rotation_file, quiet)
    rotation = rotation or "paired"
    clf = classifier(pipe, attr, rotation)
    ims, ok, bad = load_images(images)
    P = clf.predict_proba(pipe.encode_images(ims))
    top = topk(P, min(top_k, len(clf.labels)))
    res = [{"labels": [{"label": clf.labels[j], "prob": float(P[i, j])} for j in top[i]]} for i in range(len(P))]
    _print_labels(ok, res, bad, rotation, len(clf.labels), as_json)


def _print_labels(ok, res, bad, rotation, n_classes, as_json):
    rows = [{"image": p, **r} for p, r in zip(ok, res)]
    if as_json:
        click.echo(json.dumps({"rotation": rotation, "n_classes": n_classes, "results": rows, "skipped": bad},
                              indent=2))
    else:
        for r in rows:
            best = r["labels"][0]
            click.echo(f"{r['image']}: {best['label']} ({best['prob']:.3f})")
            for c in r["labels"][1:]:
                click.echo(f"    {c['label']} ({c['prob']:.3f})")
    _done(bad)


def _default_classify_rotation(image_encoder: str, device: str, rotation_file) -> str:
    """``head`` (no image-caption pair) when the image encoder has a classifier head and no map file is
    given, else ``paired``. On the validation photos head was as good in-domain (Tux Paint val top-1 57.1 %
    both) and far better on everyday photos (GCompris val 64.3 % vs 36.9 % of 44 classes; openclipart 9.1 %
    vs 6.4 % of 255; docs/results/captions.md)."""
    if rotation_file:
        return "paired"
    from captioner.encoders import get_encoder
    from captioner.encoders.heads import has_classifier_head

    return "head" if has_classifier_head(get_encoder(image_encoder, device=device)) else "paired"


def split_label_words(args) -> tuple[tuple, list[str]]:
    """(image paths, extra labels): with ``--labels cat dog car`` click hands ``dog`` and ``car`` over as image
    arguments; a word that is no existing file and has no path separator or file extension is a label."""
    import os
    import re

    paths, words = [], []
    for a in args:
        if not os.path.exists(a) and re.fullmatch(r"[^/\\.]+", a):
            words.append(a)
        else:
            paths.append(a)
    if not paths:
        raise click.UsageError(f"no image file given (took {', '.join(words)} as labels); put the images "
                               "before --labels, e.g. captioner classify photo.jpg --labels cat,dog")
    return tuple(paths), words


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
