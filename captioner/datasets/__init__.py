"""Datasets: one loader per file, one registry (``DATASETS``) read by ``get_dataset``, the CLI's choices,
the bank and the docs.

Each loader yields ``Sample(id, source, captions, label)`` in a ``CaptionDataset``; images load lazily via
``captioner.images.load_image``. The embedded sets (Tux Paint stamps, Noto emoji, sample photos, GCompris'
photos, openclipart drawings, the JEPA world) need nothing but the system packages; the real formats (COCO
Karpathy ``dataset_coco.json``, official COCO ``captions_*.json``, ImageNet-100 folders, a plain image
folder) need ``root``.

Adding a dataset: a file ``captioner/datasets/<name>.py`` with its loader ``load(split, **kw) ->
CaptionDataset`` (``load(root, split, **kw)`` when it lives on disk), one ``DatasetSpec`` line in
``DATASETS`` below (or ``register_dataset(spec)`` from a plug-in), and a test.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from captioner.datasets.base import (
    DATA_DIR,
    IMAGE_EXTS,
    SPLITS,
    CaptionDataset,
    Sample,
    check_split,
    first_caption,
    split_by_label,
    split_of,
)
from captioner.datasets.coco import coco_karpathy, coco_official
from captioner.datasets.emoji import EMOJI_FONT, EmojiRenderer, emoji
from captioner.datasets.folders import image_folder, imagenet100, imagenet100_classes
from captioner.datasets.gcompris import GCOMPRIS_RCC, gcompris
from captioner.datasets.openclipart import OPENCLIPART_ROOT, openclipart
from captioner.datasets.sample_photos import SAMPLE_PHOTOS, samples
from captioner.datasets.tuxpaint import TUXPAINT_ROOT, tuxpaint
from captioner.datasets.world import world
from captioner.errors import CaptionerError


@dataclass(frozen=True)
class DatasetSpec:
    """One registry entry.

    name : the registry name (``--dataset``).
    load : the loader: ``load(split, **kw)``, or ``load(root, split, **kw)`` when ``needs_root``.
    about : one line for the help and the docs.
    needs_root : the set lives in a folder the user points at (``--root``).
    root_kw : for an embedded set, the keyword a given ``root`` goes to (None: it takes none).
    bank_split : the split a caption bank named after the set reads (``captioner.bank.bank_sets``).
    evals : the evaluations that score it by name (``captioner eval coco|zeroshot --dataset``).
    """

    name: str
    load: Callable[..., CaptionDataset]
    about: str
    needs_root: bool = False
    root_kw: str | None = "root"
    bank_split: str = "train"
    evals: tuple[str, ...] = ()


DATASETS: dict[str, DatasetSpec] = {s.name: s for s in (
    DatasetSpec("tuxpaint", tuxpaint, "Tux Paint stamps with English captions and 15 categories (embedded)",
                evals=("coco", "zeroshot")),
    DatasetSpec("emoji", emoji, "Noto Color Emoji renders named by Unicode (embedded, fast)", root_kw="font_path",
                bank_split="all"),
    DatasetSpec("samples", samples, "scikit-image sample photos with hand-written captions (embedded)",
                root_kw=None),
    DatasetSpec("coco", coco_karpathy, "COCO Karpathy split: --root with dataset_coco.json and the images",
                needs_root=True),
    DatasetSpec("coco-official", coco_official, "official COCO captions_<split>.json: --root, --split val2014",
                needs_root=True),
    DatasetSpec("imagenet100", imagenet100, "ImageNet-100 class folders: --root with <split>/<wnid>/",
                needs_root=True, evals=("zeroshot",)),
    DatasetSpec("folder", image_folder, "any image folder with class sub-folders: --root", needs_root=True),
    DatasetSpec("gcompris", gcompris, "GCompris' labelled real photos (Debian gcompris-qt-data), split by label"),
    DatasetSpec("openclipart", openclipart, "openclipart object drawings with titles (Debian openclipart-svg)"),
    DatasetSpec("world", world,
                "the JEPA world: clean renders of generated scenes with their captions (seeded scene splits)",
                root_kw=None, evals=("coco", "zeroshot")),
)}


def register_dataset(spec: DatasetSpec, replace: bool = False) -> DatasetSpec:
    """Add ``spec`` to the registry (a plug-in, or a test's fake); refuses to shadow a name silently."""
    if spec.name in DATASETS and not replace:
        raise CaptionerError(f"dataset {spec.name!r} is registered already; pass replace=True to replace it")
    DATASETS[spec.name] = spec
    return spec


def unregister_dataset(name: str) -> None:
    DATASETS.pop(name, None)


def dataset_names(evaluation: str | None = None) -> list[str]:
    """The registered names (click choices read them): all, or those ``evaluation`` ("coco", "zeroshot")
    scores by name."""
    return [n for n, s in DATASETS.items() if evaluation is None or evaluation in s.evals]


def get_dataset(name: str, split: str = "test", root: str | os.PathLike | None = None, **kw) -> CaptionDataset:
    """Load dataset ``name`` (a key of ``DATASETS``) for ``split``; ``root`` for those that live on disk.

    Raises CaptionerError, in one line, for an unknown name (listing the known ones) or a missing root."""
    spec = DATASETS.get(name)
    if spec is None:
        raise CaptionerError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    if spec.needs_root:
        if root is None:
            raise CaptionerError(f"dataset {name!r} needs --root DIR ({spec.about})")
        return spec.load(root, split, **kw)
    if root is not None:
        if spec.root_kw is None:
            raise CaptionerError(f"dataset {name!r} takes no --root (it is embedded)")
        kw[spec.root_kw] = root
    return spec.load(split, **kw)


__all__ = [
    "DATASETS", "DATA_DIR", "EMOJI_FONT", "GCOMPRIS_RCC", "IMAGE_EXTS", "OPENCLIPART_ROOT", "SAMPLE_PHOTOS",
    "SPLITS", "TUXPAINT_ROOT", "CaptionDataset", "DatasetSpec", "EmojiRenderer", "Sample", "check_split",
    "coco_karpathy", "coco_official", "dataset_names", "emoji", "first_caption", "gcompris", "get_dataset",
    "image_folder", "imagenet100", "imagenet100_classes", "openclipart", "register_dataset", "samples",
    "split_by_label", "split_of", "tuxpaint", "unregister_dataset", "world",
]
