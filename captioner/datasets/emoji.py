"""``emoji``: the fast test set, Noto Color Emoji glyphs named by Unicode (Debian fonts-noto-color-emoji)."""
from __future__ import annotations

import hashlib
import os
import unicodedata
from functools import lru_cache
from pathlib import Path

from captioner.datasets.base import CaptionDataset, Sample, check_split, split_of
from captioner.errors import CaptionerError

EMOJI_FONT = Path("/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf")


class EmojiRenderer:
    """Renders one emoji with Noto Color Emoji (a bitmap font: size 109 only) on white."""

    def __init__(self, ch: str, font_path: str = str(EMOJI_FONT), size: int = 136):
        self.ch, self.font_path, self.size = ch, font_path, size
        self.__name__ = f"emoji U+{ord(ch):04X}"

    def __call__(self):
        from PIL import Image, ImageDraw

        font = _emoji_font(self.font_path)
        im = Image.new("RGB", (self.size, self.size), (255, 255, 255))
        ImageDraw.Draw(im).text((self.size // 2, self.size // 2), self.ch, font=font, embedded_color=True,
                                anchor="mm")
        return im


@lru_cache(maxsize=2)
def _emoji_font(path: str):
    from PIL import ImageFont

    return ImageFont.truetype(path, 109)


def _emoji_codepoints(font_path: str) -> list[str]:
    """Single-codepoint emoji the font has a glyph for, with a Unicode name."""
    try:

        font = _emoji_font(font_path)
    except OSError:
        raise CaptionerError(f"emoji font not found at {font_path}; run scripts/setup.sh "
                             "(apt-get install fonts-noto-color-emoji)") from None
    chars = []
    ranges = [(0x1F000, 0x1FAFF), (0x2000, 0x2BFF), (0x3030, 0x303D), (0x3297, 0x3299)]
    for lo, hi in ranges:
        for cp in range(lo, hi + 1):
            ch = chr(cp)
            name = unicodedata.name(ch, "")
            if not name:
                continue
            try:
                if font.getmask(ch).getbbox() is None:
                    continue
            except (OSError, ValueError):
                continue
            chars.append(ch)
    return chars


@lru_cache(maxsize=2)
def _emoji_all(font_path: str) -> tuple:
    """``_emoji_codepoints`` kept under ``$CAPTIONER_HOME/corpus`` (rendering 5,312 glyphs to find them takes
    ~1.6 s), keyed by the font file's hash, PIL's version and the Unicode database's version."""
    import json

    import PIL

    from captioner.encoders.base import hash_files
    from captioner.paths import atomic_write_json, subdir

    key = hashlib.sha256(json.dumps([hash_files([font_path]), PIL.__version__, unicodedata.unidata_version])
                         .encode()).hexdigest()[:16]
    path = subdir("corpus") / f"emoji-codepoints-{key}.json"
    try:
        return tuple(chr(c) for c in json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    chars = _emoji_codepoints(font_path)
    try:
        atomic_write_json(path, [ord(c) for c in chars])
    except OSError:
        pass  # an optimisation only
    return tuple(chars)


def emoji(split: str = "test", font_path: str | os.PathLike = EMOJI_FONT, seed: int = 0) -> CaptionDataset:
    """The fast test set: single-codepoint Noto Color Emoji rendered on white; caption = the lower-cased
    Unicode name ("grinning face"). Split 70/10/20 by seeded hash of the name."""
    check_split("emoji", split)
    if not Path(font_path).exists():
        raise CaptionerError(f"emoji font not found at {font_path}; run scripts/setup.sh "
                             "(apt-get install fonts-noto-color-emoji)")
    samples = []
    for ch in _emoji_all(str(font_path)):
        name = unicodedata.name(ch).lower()
        if split != "all" and split_of(name, seed) != split:
            continue
        samples.append(Sample(id=f"U+{ord(ch):04X}", source=EmojiRenderer(ch, str(font_path)), captions=[name]))
    return CaptionDataset("emoji", split, samples, root=str(font_path))

