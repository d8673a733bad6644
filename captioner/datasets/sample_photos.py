"""``samples``: a few real photos (scikit-image's sample data) with hand-written captions."""
from __future__ import annotations

import io

import numpy as np

from captioner.datasets.base import CaptionDataset, Sample
from captioner.errors import CaptionerError

# Hand-written captions of the photos scikit-image ships (smoke tests and demo examples).
SAMPLE_PHOTOS = {
    "astronaut": "An astronaut in a white space suit with an American flag.",
    "chelsea": "A tabby cat looking to the side.",
    "coffee": "A cup of coffee on a saucer with a spoon.",
    "rocket": "A rocket on a launch pad.",
    "motorcycle_left": "A red motorcycle parked in a garage.",
    "cat": "A cat sitting and looking at the camera.",
    "hubble_deep_field": "Galaxies in deep space seen by a telescope.",
    "immunohistochemistry": "A stained tissue sample under a microscope.",
}
# The scikit-image loader of each photo whose id is not the loader's own name, and which of the arrays it
# returns is the photo (``stereo_motorcycle()`` gives (left, right, disparity)).
SAMPLE_LOADERS = {"motorcycle_left": ("stereo_motorcycle", 0)}


def samples(split: str = "all") -> CaptionDataset:
    """A few real photos (scikit-image's sample data) with hand-written captions, saved once as PNG."""
    from captioner.paths import atomic_write_bytes, subdir

    try:
        import skimage.data as skd
    except ImportError:
        raise CaptionerError("scikit-image is not installed; run scripts/setup.sh") from None
    from PIL import Image

    folder = subdir("sample-photos")
    out = []
    for name, cap in SAMPLE_PHOTOS.items():
        path = folder / f"{name}.png"
        if not path.exists():
            loader, index = SAMPLE_LOADERS.get(name, (name, 0))
            fn = getattr(skd, loader, None)
            if fn is None:  # an older or newer scikit-image without this photo
                continue
            try:
                a = fn()
            except Exception:  # noqa: BLE001 - a photo scikit-image would have to download: skip it
                continue
            if isinstance(a, tuple):  # stereo pairs etc.
                a = a[index]
            a = np.asarray(a)
            if a.dtype != np.uint8:  # PNG wants 8-bit (or 16-bit) integers
                a = np.clip(a * 255.0 if a.dtype.kind == "f" and a.max() <= 1.0 else a, 0, 255).astype(np.uint8)
            buf = io.BytesIO()  # a temp file of this process's own, renamed: writers at once never collide
            Image.fromarray(a).save(buf, format="PNG")
            atomic_write_bytes(path, buf.getvalue())
        out.append(Sample(id=name, source=str(path), captions=[cap]))
    return CaptionDataset("samples", split, out, root=str(folder))

