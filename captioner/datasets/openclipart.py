"""``openclipart``: Debian ``openclipart-svg`` drawings of objects (the folders in ``OPENCLIPART_OBJECTS``:
animals, food, vehicles ...; no icons, signs, shapes or flags), rendered with cairosvg on white; the
caption is the drawing's title (and its description when it has one), the label its title.

Split 40/30/30 into train/val/test by a seeded hash of the label, so one label never crosses splits.
``test`` is held out: nothing is chosen or tuned on it.
"""
from __future__ import annotations

import io
import re
from functools import lru_cache
from pathlib import Path

from captioner.datasets.base import CaptionDataset, Sample, split_by_label
from captioner.datasets.gcompris import PHOTO_FRACTIONS
from captioner.errors import BadImageError, CaptionerError

OPENCLIPART_ROOT = Path("/usr/share/openclipart/svg")


# openclipart: object folders only (icons, signs, shapes, flags, maps, patterns and the unsorted folder out).
OPENCLIPART_OBJECTS = ("animals", "buildings", "containers", "electronics", "food", "office", "plants",
                       "recreation/music", "recreation/sports", "recreation/toys",
                       "science/astronomy", "tools", "transportation/vehicles", "transportation/boating",
                       "people/clothing")
_JUNK_TITLE = re.compile(r"^(clipart by|untitled|drawing|image|svg|new document|layer)\b|\.svg$|^[\W\d_]+$",
                         re.IGNORECASE)


class SvgImage:
    """A zero-argument renderer of one SVG drawing (cairosvg, 224 px wide, composited on white)."""

    def __init__(self, path: str, width: int = 224):
        self.path, self.width = path, width
        self.__name__ = path

    def __call__(self):
        try:
            import cairosvg
        except ImportError:
            raise CaptionerError("cairosvg is not installed; run scripts/setup.sh (pip install cairosvg)") from None
        from PIL import Image

        from captioner.images import to_rgb

        try:
            png = cairosvg.svg2png(url=self.path, output_width=self.width)
            im = Image.open(io.BytesIO(png))
            im.load()
        except Exception as e:  # noqa: BLE001 - malformed SVGs raise many kinds of errors
            raise BadImageError(self.path, f"cannot render the SVG ({type(e).__name__})") from None
        return to_rgb(im)


def _svg_meta(path: Path) -> tuple[str, str]:
    """(title, description) from an SVG's RDF metadata (the first dc:title is the work's)."""
    head = path.read_bytes()[:20000].decode("utf-8", "replace")

    def one(tag):
        m = re.search(rf"<dc:{tag}>(.*?)</dc:{tag}>", head, re.S)
        return " ".join(m.group(1).split()) if m else ""
    from html import unescape

    return unescape(one("title")), unescape(one("description"))


@lru_cache(maxsize=2)
def _openclipart_all(root: str) -> tuple:
    from captioner.subject import has_subject

    rootp = Path(root)
    if not rootp.is_dir():
        raise CaptionerError(f"openclipart not found at {rootp}; run scripts/setup.sh "
                             "(apt-get install openclipart-svg)")
    out = []
    for folder in OPENCLIPART_OBJECTS:
        for f in sorted((rootp / folder).rglob("*.svg")):
            title, desc = _svg_meta(f)
            if not title or _JUNK_TITLE.search(title) or not has_subject(title):
                continue
            desc = "" if desc.startswith("HASH(") else desc  # an exporter's placeholder
            caps = [title] + ([desc] if desc and desc.lower() != title.lower() else [])
            out.append(Sample(id=str(f.relative_to(rootp).with_suffix("")), source=SvgImage(str(f)),
                              captions=caps, label=title))
    return tuple(out)


def openclipart(split: str = "val", root=OPENCLIPART_ROOT, seed: int = 0) -> CaptionDataset:
    """openclipart object drawings with English titles (see the module docstring); split 40/30/30 by title."""
    samples = split_by_label("openclipart", split, list(_openclipart_all(str(root))), seed, PHOTO_FRACTIONS)
    return CaptionDataset("openclipart", split, samples, labels=sorted({s.label for s in samples}), root=str(root))
