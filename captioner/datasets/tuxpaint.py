"""``tuxpaint``: the embedded image-caption set (Tux Paint stamps, Debian tuxpaint-stamps-default)."""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from captioner.datasets.base import CaptionDataset, Sample, check_split, first_caption, split_of
from captioner.errors import CaptionerError

TUXPAINT_ROOT = Path("/usr/share/tuxpaint/stamps")


@lru_cache(maxsize=4)
def _tuxpaint_all(root: str, include_symbols: bool) -> tuple:
    rootp = Path(root)
    if not rootp.is_dir():
        raise CaptionerError(f"Tux Paint stamps not found at {rootp}; run scripts/setup.sh "
                             "(apt-get install tuxpaint-stamps-default)")
    out = []
    for png in sorted(rootp.rglob("*.png")):
        if png.stem.endswith("_mirror"):
            continue  # Tux Paint's pre-flipped duplicates
        rel = png.relative_to(rootp)
        category = rel.parts[0]
        if category == "symbols" and not include_symbols:
            continue
        txt = png.with_suffix(".txt")
        cap = first_caption(txt) if txt.exists() else ""
        if not cap:
            continue
        out.append(Sample(id=str(rel.with_suffix("")), source=str(png), captions=[cap], label=category))
    return tuple(out)


def tuxpaint(split: str = "test", root: str | os.PathLike = TUXPAINT_ROOT, seed: int = 0,
             include_symbols: bool = False) -> CaptionDataset:
    """The embedded image-caption set: Tux Paint stamps (real photo cut-outs, composited on white), the
    first line of each stamp's ``.txt`` as caption, the top-level folder as category. Split 70/10/20 by
    caption (seeded hash), so a caption shared by two stamps never crosses splits."""
    check_split("tuxpaint", split)
    samples = list(_tuxpaint_all(str(root), include_symbols))
    if split != "all":
        samples = [s for s in samples if split_of(s.captions[0].lower(), seed) == split]
    labels = sorted({s.label for s in _tuxpaint_all(str(root), include_symbols)})
    return CaptionDataset("tuxpaint", split, samples, labels=labels, root=str(root))

