"""``folder`` (any image folder with class sub-folders) and ``imagenet100`` (the standard 100-class subset)."""
from __future__ import annotations

import os
from pathlib import Path

from captioner.datasets.base import DATA_DIR, IMAGE_EXTS, CaptionDataset, Sample, first_caption
from captioner.errors import CaptionerError


def imagenet100_classes() -> list[tuple[str, str]]:
    """The standard ImageNet-100 subset (Tian et al., CMC 2019) as (wnid, class name), from
    ``captioner/data/imagenet100.txt``."""
    path = DATA_DIR / "imagenet100.txt"
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        wnid, _, name = line.partition("\t") if "\t" in line else line.partition(" ")
        rows.append((wnid.strip(), name.strip() or wnid.strip()))
    return rows


def image_folder(root: str | os.PathLike, split: str = "val", classes: list[tuple[str, str]] | None = None,
                 name: str = "folder") -> CaptionDataset:
    """Images in class sub-folders: ``root/<split>/<class>/*.jpg`` (or ``root/<class>/*.jpg``). The label is
    the class name; the caption "a photo of a <name>." unless a sidecar ``.txt`` gives one."""
    root = Path(root)
    base = root / split if (root / split).is_dir() else root
    if not base.is_dir():
        raise CaptionerError(f"{root}: not a folder; expected {root}/{split}/<class>/<image files>")
    if classes is None:
        try:
            classes = [(d.name, d.name.replace("_", " ")) for d in sorted(base.iterdir()) if d.is_dir()]
        except OSError as e:
            raise CaptionerError(f"{base}: cannot list the folder ({e.strerror}); fix its permissions") from None
    out, skipped = [], []
    for wnid, cname in classes:
        d = base / wnid
        if not d.is_dir():
            skipped.append((wnid, f"missing class folder {d}"))
            continue
        try:
            files = sorted(d.iterdir())
        except OSError as e:
            raise CaptionerError(f"{d}: cannot list the class folder ({e.strerror}); fix its permissions or "
                                 "remove it") from None
        for f in files:
            if f.suffix.lower() not in IMAGE_EXTS:
                continue
            txt = f.with_suffix(".txt")
            try:
                cap = first_caption(txt) if txt.is_file() else f"a photo of a {cname}."
            except OSError as e:
                raise CaptionerError(f"{txt}: cannot read the caption ({e.strerror}); fix or remove it") from None
            out.append(Sample(id=f"{wnid}/{f.stem}", source=str(f), captions=[cap or f"a photo of a {cname}."],
                              label=cname))
    if not out:
        raise CaptionerError(f"{base}: no images found in class folders"
                             + (f" (first problem: {skipped[0][1]})" if skipped else ""))
    return CaptionDataset(name, split, out, labels=[c for _, c in classes], root=str(root), skipped=skipped)


def imagenet100(root: str | os.PathLike, split: str = "val") -> CaptionDataset:
    """ImageNet-100: ``root/<split>/<wnid>/*.JPEG`` for the 100 WordNet ids of the standard subset."""
    classes = imagenet100_classes()
    base = Path(root) / split if (Path(root) / split).is_dir() else Path(root)
    if base.is_dir() and not any((base / w).is_dir() for w, _ in classes):
        raise CaptionerError(f"{base}: none of the 100 ImageNet-100 class folders (e.g. {classes[0][0]}/) exist; "
                             "point --root at the folder holding train/ and val/")
    return image_folder(root, split, classes=classes, name="imagenet100")

