"""Image decoding that never surprises: every mode Pillow reads comes out as 8-bit RGB.

RGBA / LA / P-with-transparency are composited on white (the Tux Paint stamps are cut-outs), 16-bit and
float images are rescaled, CMYK and grayscale are converted, animated images give their first frame, and
huge images are downscaled while decoding instead of tripping Pillow's decompression-bomb guard.
"""
from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Union

import numpy as np
from PIL import Image, ImageFile, UnidentifiedImageError

from captioner.errors import BadImageError

ImageSource = Union[str, os.PathLike, Image.Image, Callable[[], Image.Image]]

# Anything above this many pixels is reduced while decoding (JPEG draft mode) or right after.
MAX_PIXELS = 4096 * 4096
# Pillow's own guard refuses images above 2 x MAX_IMAGE_PIXELS; we handle size ourselves, within reason.
HARD_MAX_PIXELS = 20000 * 20000
# ... and no decode may allocate more than this for its raster (a 10000 x 10000 RGB photo takes 381 MiB;
# a 20000 x 20000 RGBA PNG, 1.5 MB on disk, would take 1,526 MiB and is refused from its header).
MAX_DECODE_BYTES = 512 * 2**20


def to_rgb(im: Image.Image, background=(255, 255, 255)) -> Image.Image:
    """Convert any Pillow image to 8-bit RGB, compositing transparency on ``background``."""
    if getattr(im, "n_frames", 1) > 1:
        im.seek(0)
    mode = im.mode
    if mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        a = np.asarray(im, dtype=np.float64)
        lo, hi = float(a.min()), float(a.max())
        a = (a - lo) / (hi - lo) * 255.0 if hi > lo else np.zeros_like(a)
        im = Image.fromarray(a.astype(np.uint8), mode="L")
        mode = "L"
    if mode == "P" and "transparency" in im.info:
        im = im.convert("RGBA")
        mode = "RGBA"
    if mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        if mode != "RGBA":  # (converting RGBA to RGBA would only copy it)
            im = im.convert("RGBA")
        canvas = Image.new("RGB", im.size, background)
        canvas.paste(im, mask=im.getchannel("A"))
        return canvas
    if mode != "RGB":
        im = im.convert("RGB")
    return im


def _open_path(path: Path, max_pixels: int) -> Image.Image:
    """Open a file lazily, check its header's size against the pixel and memory budgets, then decode
    (JPEG at a reduced scale when it is large). Raises BadImageError naming the file."""
    try:
        st = os.stat(path)  # follows symlinks: a loop raises ELOOP here
    except FileNotFoundError:
        raise BadImageError(path, "file not found; check the path or the dataset root") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise BadImageError(path, "symbolic link loop; point the link at a real file") from None
        raise BadImageError(path, f"cannot read ({e.strerror}); check its permissions") from None
    if stat.S_ISDIR(st.st_mode):
        raise BadImageError(path, "is a folder, not an image file")
    if not stat.S_ISREG(st.st_mode):  # a FIFO, socket or device: opening it could block forever
        raise BadImageError(path, "not a regular file (a pipe, socket or device); give an image file")
    try:
        im = Image.open(path)
        w, h = im.size
        if w * h > HARD_MAX_PIXELS:
            raise BadImageError(path, f"image is {w}x{h} pixels, above the {HARD_MAX_PIXELS:,} pixel limit; "
                                      "downscale it first")
        if w * h > max_pixels and im.format == "JPEG":
            im.draft("RGB", (max(1, w * 4096 // max(w, h)), max(1, h * 4096 // max(w, h))))
        need = decoded_bytes(im)
        if need > MAX_DECODE_BYTES:
            raise BadImageError(path, f"image is {w}x{h} {im.mode}: decoding it would take "
                                      f"{need / 2**20:,.0f} MiB, above the {MAX_DECODE_BYTES / 2**20:,.0f} MiB "
                                      "limit; downscale it first")
        im.load()
        return im
    except BadImageError:
        raise
    except UnidentifiedImageError:
        raise BadImageError(path, "not an image Pillow can read (PNG, JPEG, GIF, BMP, TIFF, WebP ...)") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise BadImageError(path, f"unreadable or truncated image ({e}); re-export or remove the file") from None
    except MemoryError:
        raise BadImageError(path, "out of memory while decoding; downscale it first") from None


def decoded_bytes(im: Image.Image) -> int:
    """Bytes Pillow allocates for the raster of ``im`` (opened, not loaded) at its current (draft) size:
    one byte a pixel for 1/L/P, two for 16-bit, four for every other mode (Pillow keeps RGB in 32 bits)."""
    w, h = im.size
    per_pixel = 1 if im.mode in ("1", "L", "P") else 2 if im.mode.startswith("I;16") else 4
    return w * h * per_pixel


def load_image(src: ImageSource, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """Load ``src`` (a path, a PIL image, or a zero-argument renderer) as an RGB PIL image.

    Files are checked before decoding: only regular files are opened, and an image whose decoded raster
    would exceed :data:`MAX_DECODE_BYTES` (after JPEG's reduced-scale decoding) is refused.

    Raises
    ------
    BadImageError
        The file is missing, is not an image, is too large, or is truncated; the message names the file
        and the fix.
    """
    if isinstance(src, Image.Image):
        im = src
        name = "<image>"
    elif callable(src):
        im = src()
        name = getattr(src, "__name__", "<rendered image>")
    else:
        name = str(src)
        im = _open_path(Path(src), max_pixels)
    try:
        if im.width * im.height > max_pixels:
            im.thumbnail((4096, 4096))
        return to_rgb(im)
    except (OSError, ValueError) as e:
        raise BadImageError(name, f"cannot convert to RGB ({e})") from None


# Pillow's guard would refuse a 10000x10000 upload before we could downscale it; we check sizes ourselves.
Image.MAX_IMAGE_PIXELS = HARD_MAX_PIXELS
ImageFile.LOAD_TRUNCATED_IMAGES = False
