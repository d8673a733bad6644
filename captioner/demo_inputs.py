"""What the demo accepts from a page: example images, label lists and sets, encoder choices, uploaded image
files (decoded under a bound on memory and concurrency). Plain functions of plain values, so tests call them
without a server; bad input is a :class:`DemoInputError` with one readable line."""
from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

from captioner.errors import BadImageError, CaptionerError

log = logging.getLogger(__name__)

TUXPAINT_STAMPS = Path("/usr/share/tuxpaint/stamps")
# One held-out stamp from each of these categories becomes an example.
EXAMPLE_STAMP_CATEGORIES = ("animals", "food", "vehicles", "plants", "space", "sports")
EXAMPLE_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "motorcycle_left")

MAX_LABELS = 1000            # ImageNet-1k fits; above this the list is cut with a message
# The pipeline prompts each label with 80 ImageNet templates: 1,000 labels would be 80,000 sentences to
# embed (over ten minutes on two cores). Above FULL_PROMPT_LABELS labels the demo asks for one template when
# the pipeline's classify() takes ``templates=``, and otherwise stops at FULL_PROMPT_LABELS.
FULL_PROMPT_LABELS = 50
FAST_TEMPLATES = ["a photo of a {}."]
MAX_LABEL_CHARS = 200        # a "label" longer than this is a pasted paragraph: cut it
MAX_LABEL_TEXT = 1_000_000   # characters in the label box before we refuse to parse it at all
MAX_TOP_K = 20
MAX_UPLOAD = "25mb"          # gradio refuses bigger uploads itself, with its own message
# Decoding happens outside the pipeline's lock; each decode may take up to images.MAX_DECODE_BYTES, so at
# most this many run at once (a 1.5 MB PNG can declare 20000 x 20000 pixels).
DECODE_CONCURRENCY = 2
DECODE_SLOTS = threading.BoundedSemaphore(DECODE_CONCURRENCY)


class DemoInputError(CaptionerError):
    """Input the page should refuse with a readable message (never a traceback)."""


def example_images(n_photos: int = len(EXAMPLE_PHOTOS), stamps_root: Path = TUXPAINT_STAMPS) -> list[str]:
    """Paths of the example images: scikit-image sample photos (saved once as PNG under
    ``$CAPTIONER_HOME/sample-photos``) and one Tux Paint stamp per category in
    :data:`EXAMPLE_STAMP_CATEGORIES`, taken from the test split (when the stamps are installed)."""
    out: list[str] = []
    try:
        from captioner.datasets import samples

        by_id = {s.id: s.source for s in samples().samples}
        out += [str(by_id[n]) for n in EXAMPLE_PHOTOS[:n_photos] if n in by_id]
    except (CaptionerError, OSError) as e:  # scikit-image missing or home not writable: stamps only
        log.warning("no sample photos for the demo examples: %s", e)
    if stamps_root.is_dir():
        from captioner.datasets import tuxpaint

        try:
            # Held-out stamps: their captions are not in the bank, so the demo shows what a user would get.
            test = tuxpaint("test", root=stamps_root).samples
        except CaptionerError as e:
            log.warning("no Tux Paint examples: %s", e)
            test = []
        for cat in EXAMPLE_STAMP_CATEGORIES:
            first = next((s for s in test if s.label == cat), None)
            if first is not None:
                out.append(str(first.source))
    return out


def tuxpaint_categories(stamps_root: Path = TUXPAINT_STAMPS) -> list[str]:
    """The Tux Paint stamp categories as the words `captioner eval zeroshot` prompts them with ("natural force",
    "piece of clothing"; ``symbols`` left out), in its order: the demo's zero-shot head is then the one `make
    eval` embedded (its 1,200 prompts hit the same cache entry)."""
    from captioner.zeroshot import TUXPAINT_CLASSNAMES

    if not stamps_root.is_dir():
        return []
    names = sorted(p.name for p in stamps_root.iterdir() if p.is_dir() and p.name != "symbols")
    return [TUXPAINT_CLASSNAMES.get(n, n) for n in names]


def label_sets() -> dict[str, list[str]]:
    """Named label sets for the zero-shot tab: the Tux Paint categories and a few of clip-benchmark's
    ``en_classnames.json`` sets (only those whose files are installed)."""
    sets: dict[str, list[str]] = {}
    tux = tuxpaint_categories()
    if tux:
        sets[f"Tux Paint categories ({len(tux)})"] = tux
    try:
        from captioner.assets import classnames

        for key, title in (("pets", "Oxford pets"), ("caltech101", "Caltech-101"), ("imagenet1k", "ImageNet-1k")):
            names = classnames(key)
            sets[f"{title} ({len(names)})"] = names
    except CaptionerError as e:
        log.warning("clip-benchmark label sets unavailable: %s", e)
    if not sets:
        sets["colours (6)"] = ["red", "green", "blue", "white", "black", "yellow"]
    return sets


def parse_labels(text: str | None, max_labels: int = MAX_LABELS) -> tuple[list[str], str]:
    """Labels from the text box: one per line or comma separated, stripped, duplicates dropped (first kept,
    case ignored, as the zero-shot head refuses two classes with the same name).

    Returns
    -------
    labels : list[str]
        At most ``max_labels`` labels, each at most :data:`MAX_LABEL_CHARS` characters.
    note : str
        A message for the page when the list was cut (empty otherwise).

    Raises
    ------
    DemoInputError
        No label at all, or a text too large to parse.
    """
    text = text or ""
    if len(text) > MAX_LABEL_TEXT:
        raise DemoInputError(f"the label list is {len(text):,} characters long; paste at most "
                             f"{MAX_LABEL_TEXT:,} characters ({max_labels:,} labels)")
    seen: dict[str, str] = {}
    long_cut = 0
    for part in re.split(r"[\n,]", text):
        label = " ".join(part.split())
        if not label:
            continue
        if len(label) > MAX_LABEL_CHARS:
            label, long_cut = label[:MAX_LABEL_CHARS], long_cut + 1
        seen.setdefault(label.lower(), label)
    labels = list(seen.values())
    if not labels:
        raise DemoInputError("the label list is empty: enter at least two labels, one per line or comma "
                             "separated (or pick a label set)")
    notes = []
    if len(labels) > max_labels:
        notes.append(f"{len(labels):,} labels given; classified against the first {max_labels:,}")
        labels = labels[:max_labels]
    if long_cut:
        notes.append(f"{long_cut} label(s) longer than {MAX_LABEL_CHARS} characters were cut")
    return labels, "; ".join(notes)


def encoder_name(pipeline, which: str, default: str) -> str:
    """The registry name of a pipeline's image or text encoder (the attribute may hold a name or an
    :class:`Encoder`)."""
    for attr in (f"{which}encoder_name", f"{which}_encoder"):
        v = getattr(pipeline, attr, None)
        if isinstance(v, str):
            return v
        if v is not None and isinstance(getattr(v, "name", None), str):
            return v.name
    return default


def encoder_choices(pipeline=None) -> tuple[list[str], list[str]]:
    """(image encoder names, text encoder names) the dropdowns offer: the offline encoders, the trained
    checkpoints under ``$CAPTIONER_HOME/checkpoints``, and the current pipeline's own pair."""
    images: list[str] = []
    texts: list[str] = []
    try:
        from captioner.encoders import list_encoders

        for row in list_encoders():
            name, modality = row["name"], row.get("modality", "?")
            if name.endswith("..."):  # "hf-image:..." placeholders: not a model one can pick
                continue
            if modality in ("image", "?", "any"):
                images.append(name)
            if modality in ("text", "?", "any"):
                texts.append(name)
    except Exception as e:  # a broken registry must not keep the page from starting
        log.warning("encoder registry unavailable: %s", e)
    if pipeline is not None:
        for lst, which, default in ((images, "image", "efficientnet-lite0"), (texts, "text", "minilm-l6")):
            name = encoder_name(pipeline, which, default)
            if name not in lst:
                lst.insert(0, name)
    return images, texts


def image_source(value) -> tuple[Any, str]:
    """What the page (or a test) sends for an image -> (a path or PIL image, a name for messages).

    The events run with ``preprocess=False`` so that gradio does not open the upload itself (it would fail
    on a non-image with a generic "Error"); the value is then gradio's FileData dict."""
    from PIL import Image

    if value is None or value == "" or value == {}:
        raise DemoInputError("no image: upload one or pick an example first")
    if isinstance(value, dict):
        path = value.get("path")
        if not path:
            raise DemoInputError("no image: upload one or pick an example first")
        return path, value.get("orig_name") or Path(path).name
    if isinstance(value, Image.Image):
        return value, "<image>"
    if hasattr(value, "__array_interface__"):
        import numpy as np

        return Image.fromarray(np.asarray(value)), "<array>"
    return str(value), Path(str(value)).name


def decode_image(value):
    """(PIL RGB image, milliseconds spent decoding). Huge images come back downscaled, animated ones as
    their first frame; anything unreadable raises :class:`DemoInputError` naming the upload."""
    from captioner.images import load_image

    src, name = image_source(value)
    t0 = time.perf_counter()
    try:
        with DECODE_SLOTS:  # at most DECODE_CONCURRENCY rasters in memory at once
            im = load_image(src)
    except BadImageError as e:
        raise DemoInputError(f"could not read {name!r}: {e.reason}") from None
    except MemoryError:
        raise DemoInputError(f"{name!r} is too large to decode here; downscale it first") from None
    return im, (time.perf_counter() - t0) * 1e3


def fmt_ms(t: dict) -> str:
    names = {"image_decode": "image decode", "encode": "encode", "rotate_retrieve": "rotate + retrieve",
             "decode": "caption decoding"}
    parts = [f"{names.get(k, k)} {float(v):.1f} ms" for k, v in t.items() if isinstance(v, (int, float))]
    return "Timings: " + " · ".join(parts) if parts else ""
