"""Deterministic fake encoders for fast tests (no model weights)."""
from __future__ import annotations

import hashlib

import numpy as np

from captioner.encoders.base import Encoder


class FakeTextEncoder(Encoder):
    """Each text maps to a fixed pseudo-random unit vector derived from its SHA-256."""

    name = "fake-text"
    modality = "text"
    pooling = "hash"

    def __init__(self, dim: int = 16):
        self.dim = dim
        self.calls = 0

    def weights_hash(self):
        return f"fake{self.dim}"

    def _encode(self, batch):
        self.calls += 1
        out = []
        for t in batch:
            seed = int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)
            v = np.random.default_rng(seed).standard_normal(self.dim)
            out.append(v / np.linalg.norm(v))
        return np.stack(out)


class FakeImageEncoder(Encoder):
    """Mean colour per channel and a coarse 2x2 grid of means: 15 numbers that really depend on pixels."""

    name = "fake-image"
    modality = "image"
    pooling = "grid"
    dim = 15

    def __init__(self):
        self.calls = 0

    def weights_hash(self):
        return "fake-image-v1"

    def _encode(self, batch):
        self.calls += 1
        rows = []
        for im in batch:
            a = np.asarray(im.convert("RGB").resize((8, 8)), dtype=np.float32) / 255.0  # (8, 8, 3)
            grid = [a[i:i + 4, j:j + 4].mean((0, 1)) for i in (0, 4) for j in (0, 4)]
            rows.append(np.concatenate([a.mean((0, 1))] + grid))
        return np.stack(rows)


def install_fake_encoders(monkeypatch) -> dict:
    """Route ``captioner.encoders.get_encoder`` to a fake image and a fake text encoder (returned by name;
    a test may add more to the dict). Other names raise the registry's error."""
    import captioner.encoders as encoders
    from captioner.errors import CaptionerError

    made = {"fake-image": FakeImageEncoder(), "fake-text": FakeTextEncoder(16)}

    def get_encoder(name, device="cpu", **kw):
        if name not in made:
            raise CaptionerError(f"unknown encoder {name!r}")
        return made[name]

    monkeypatch.setattr(encoders, "get_encoder", get_encoder)
    return made
