"""What every dataset yields: ``Sample(id, source, captions, label)`` in a ``CaptionDataset``, and the seeded
hash splits the embedded sets share."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from captioner.errors import CaptionerError

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".gif", ".bmp", ".tif", ".tiff", ".webp", ".ppm"}
SPLITS = ("train", "val", "test")


@dataclass
class Sample:
    id: str
    source: object  # image path (str) or a zero-argument renderer returning a PIL image
    captions: list[str]
    label: str | None = None


@dataclass
class CaptionDataset:
    name: str
    split: str
    samples: list[Sample]
    labels: list[str] | None = None
    root: str | None = None
    skipped: list = field(default_factory=list)  # (id, reason) of entries dropped while loading

    def __len__(self):
        return len(self.samples)

    def captions(self) -> list[str]:
        return [c for s in self.samples for c in s.captions]

    def key(self) -> str:
        """A short hash of what the split contains (ids and captions): part of every cache key."""
        h = hashlib.sha256()
        for s in self.samples:
            h.update(s.id.encode())
            h.update(b"\x00".join(c.encode() for c in s.captions))
            h.update(b"\x01")
        return h.hexdigest()[:12]


def split_of(key: str, seed: int = 0, fractions=(0.7, 0.1, 0.2)) -> str:
    """Deterministic split by hashing ``key`` with ``seed``: the same caption always lands in the same split
    on every machine, and one caption never appears in two splits."""
    u = int(hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "train" if u < fractions[0] else "val" if u < fractions[0] + fractions[1] else "test"



def check_split(name: str, split: str, allowed=SPLITS + ("all",)) -> None:
    """A one-line error when dataset ``name`` has no split ``split``."""
    if split not in allowed:
        raise CaptionerError(f"dataset {name!r} has no split {split!r}; choose one of {', '.join(allowed)}")


def split_by_label(name: str, split: str, samples: list, seed: int, fractions=(0.4, 0.3, 0.3)) -> list:
    """The samples of ``split`` when a dataset is split by a seeded hash of each sample's label (so one label
    never crosses splits); ``"all"`` keeps them all."""
    check_split(name, split)
    if split == "all":
        return samples
    return [s for s in samples if split_of(s.label.lower(), seed, fractions) == split]


def first_caption(txt: Path) -> str:
    """The first line of a caption sidecar file, stripped."""
    with open(txt, encoding="utf-8", errors="replace") as f:
        return f.readline().strip()
