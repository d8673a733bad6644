"""The one interface every encoder follows: ``encode(batch) -> (N, D) float32``."""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def l2n(X: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero). (N, D) -> (N, D) float32."""
    X = np.asarray(X, np.float32)
    n = np.linalg.norm(X, axis=-1, keepdims=True)
    return X / np.maximum(n, 1e-12)


class Encoder:
    """Base class. Subclasses set ``name``, ``modality`` ("image" | "text"), ``dim``, ``pooling`` and
    implement ``_encode(batch) -> np.ndarray (N, D)``."""

    name: str = "?"
    modality: str = "?"
    dim: int = 0
    pooling: str = "mean"
    device: str = "cpu"

    def encode(self, batch: Sequence) -> np.ndarray:
        """Encode a batch: a list of RGB PIL images (image encoders) or of strings (text encoders).

        Returns
        -------
        np.ndarray, shape (N, D), float32
        """
        if len(batch) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.modality == "text":
            bad = [i for i, t in enumerate(batch) if not isinstance(t, str) or not t.strip()]
            if bad:
                from captioner.errors import CaptionerError
                raise CaptionerError(f"{self.name}: empty or non-string text at batch positions {bad[:10]}; "
                                     "drop empty captions before encoding")
        out = np.asarray(self._encode(list(batch)), dtype=np.float32)
        assert out.shape == (len(batch), self.dim), (out.shape, len(batch), self.dim)
        return out

    def _encode(self, batch: list) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def extra_fingerprint(self) -> dict:
        """Parameters beyond the weights that change the output bytes (preprocessing, layer, ...)."""
        return {}

    def weights_hash(self) -> str:
        return "none"

    def fingerprint(self) -> dict:
        fp = {"name": self.name, "modality": self.modality, "dim": int(self.dim), "pooling": self.pooling,
              "weights_hash": self.weights_hash()}
        fp.update(self.extra_fingerprint())
        return fp

    def __repr__(self):
        return f"<{type(self).__name__} {self.name} {self.modality} dim={self.dim}>"


def hash_files(paths: Sequence[str | os.PathLike]) -> str:
    """SHA-256 (first 16 hex digits) over the bytes of ``paths``, memoised on (path, size, mtime) under
    the project home so that a 100 MB weight file is hashed once per machine, not once per run."""
    from captioner.paths import atomic_write_json, home

    memo_path = home() / "weights-hashes.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    h = hashlib.sha256()
    changed = False
    for p in sorted(str(Path(p).resolve()) for p in paths):
        st = os.stat(p)
        key = f"{p}:{st.st_size}:{int(st.st_mtime)}"
        if key not in memo:
            fh = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    fh.update(chunk)
            memo[key] = fh.hexdigest()
            changed = True
        h.update(memo[key].encode())
    if changed:
        try:
            atomic_write_json(memo_path, memo)
        except OSError:
            pass  # the memo is an optimisation only
    return h.hexdigest()[:16]


def preprocess_image(im, size: int = 224, mean=IMAGENET_MEAN, std=IMAGENET_STD, resize: str = "pad") -> np.ndarray:
    """RGB PIL image -> normalised float32 array (3, size, size).

    ``resize="pad"`` fits the whole image in the square and pads with white (objects on white, as the
    Tux Paint stamps, stay whole); ``"crop"`` resizes the short side and centre-crops (ImageNet eval).
    """
    from PIL import Image

    w, h = im.size
    if resize == "pad":
        s = size / max(w, h)
        nw, nh = max(1, round(w * s)), max(1, round(h * s))
        im = im.resize((nw, nh), Image.BICUBIC)
        canvas = Image.new("RGB", (size, size), (255, 255, 255))
        canvas.paste(im, ((size - nw) // 2, (size - nh) // 2))
        im = canvas
    elif resize == "crop":
        s = size / min(w, h)
        nw, nh = max(size, round(w * s)), max(size, round(h * s))
        im = im.resize((nw, nh), Image.BICUBIC)
        left, top = (nw - size) // 2, (nh - size) // 2
        im = im.crop((left, top, left + size, top + size))
    else:
        raise ValueError(f"resize must be 'pad' or 'crop', not {resize!r}")
    a = np.asarray(im, dtype=np.float32) / 255.0  # (H, W, 3)
    a = (a - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(a.transpose(2, 0, 1))  # (3, H, W)


_POOL: ThreadPoolExecutor | None = None


def preprocess_batch(images, workers: int = 2, **kw) -> np.ndarray:
    """Preprocess a list of PIL images in a small thread pool (PIL releases the GIL while resizing).

    Returns (N, 3, size, size) float32."""
    global _POOL
    if workers <= 1 or len(images) < 4:
        return np.stack([preprocess_image(im, **kw) for im in images])
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="preprocess")
    return np.stack(list(_POOL.map(lambda im: preprocess_image(im, **kw), images)))
