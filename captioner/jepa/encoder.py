"""A trained JEPA or next-token checkpoint as an ``Encoder`` (registry name ``jepa:<path>``)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from captioner.encoders.base import Encoder, l2n
from captioner.errors import CaptionerError


def state_hash(state: dict) -> str:
    """SHA-256 (16 hex) over the model tensors in name order: independent of the optimizer and the file."""
    import torch

    h = hashlib.sha256()
    for k in sorted(state):
        t = state[k].detach().cpu().contiguous()
        h.update(k.encode())
        h.update(str(tuple(t.shape)).encode() + str(t.dtype).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


class JEPAEncoder(Encoder):
    """Embeds texts (text-jepa: projected mean pool; ntp: mean of final hidden states) or images
    (image-jepa: projected global pool) with a checkpoint written by ``captioner train``."""

    def __init__(self, path: str | Path, device: str = "cpu", batch_size: int = 128, pool: str | None = None,
                 normalize: bool = False):
        import torch

        from captioner.jepa.model import build_model
        from captioner.jepa.train import TrainConfig, load_checkpoint

        ck = load_checkpoint(path)
        self.path = str(Path(path))
        self.cfg = TrainConfig.from_dict(ck["config"])
        self.step = int(ck["step"])
        self.device = device
        self.batch_size = batch_size
        model = build_model(self.cfg.kind, self.cfg.text, self.cfg.image, self.cfg.objective)
        try:
            model.load_state_dict(ck["model"])
        except RuntimeError as e:
            raise CaptionerError(f"{ck['path']}: weights do not fit preset {self.cfg.preset!r} ({e})") from None
        self._hash = state_hash(ck["model"])
        self.model = model.to(device).eval()
        self.name = f"jepa:{self.path}"
        self.kind = self.cfg.kind
        self.modality = "image" if self.kind == "image-jepa" else "text"
        if pool not in (None, "mean") and self.kind != "ntp":
            raise CaptionerError(f"{self.path}: pooling {pool!r} is for next-token checkpoints only")
        if self.kind == "ntp":   # mean of the final states, or the last token's ("last": it read the whole text)
            self.dim, self.pooling = self.cfg.text.dim, pool or "mean"
        elif self.kind == "text-jepa":
            self.dim, self.pooling = self.cfg.text.embed_dim, "mean+proj"
        else:
            self.dim, self.pooling = self.cfg.image.embed_dim, "global+proj"
        self.normalize = bool(normalize)   # unit-length rows (the JEPA world's encoders: the space its report reads)
        self._torch = torch

    def weights_hash(self) -> str:
        return self._hash

    def extra_fingerprint(self) -> dict:
        fp = {"kind": self.kind, "preset": self.cfg.preset, "step": self.step}
        if self.normalize:
            fp["normalize"] = True
        if self.kind == "ntp" and self.pooling != "mean":
            fp["pooling"] = self.pooling
        if self.modality == "text":
            fp["max_len"] = self.cfg.text.max_len
        else:
            fp["image_size"] = self.cfg.image.image_size
        return fp

    def _encode(self, batch: list) -> np.ndarray:
        torch = self._torch
        out = []
        with torch.inference_mode():
            if self.modality == "text":
                from captioner.jepa.views import pad, tokenize

                ids, _ = tokenize(batch, self.cfg.text.max_len, warn=False)
                for i in range(0, len(ids), self.batch_size):
                    x, m = pad(ids[i: i + self.batch_size])
                    kw = {"pool": self.pooling} if self.kind == "ntp" else {}
                    out.append(self.model.embed(x.to(self.device), m.to(self.device), **kw).float().cpu().numpy())
            else:
                from captioner.jepa.views import pil_to_uint8

                for i in range(0, len(batch), self.batch_size):
                    x = pil_to_uint8([im.convert("RGB") for im in batch[i: i + self.batch_size]],
                                     self.cfg.image.image_size)
                    out.append(self.model.embed(x.to(self.device).float() / 255.0).float().cpu().numpy())
        out = np.concatenate(out).astype(np.float32)
        if self.normalize:
            return l2n(out)
        return out


def load_jepa_encoder(path: str | Path, device: str = "cpu", name: str | None = None, **kw) -> JEPAEncoder:
    """``jepa:<path>``: a run folder (or its ``checkpoint.pt``) from ``captioner train`` as an Encoder.

    ``encode(texts | PIL images) -> (N, dim) float32``; ``fingerprint()`` carries the weights hash, kind,
    preset and step, so embedding caches made with another checkpoint are never reused."""
    return JEPAEncoder(path, device=device, **kw)
