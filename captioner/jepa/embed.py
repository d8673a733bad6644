"""Embeddings of trained JEPA / next-token models held in memory (eval mode, CPU): texts, uint8 image
tensors and PIL images. ``captioner.jepa.encoder`` wraps a checkpoint file as a registry encoder instead."""
from __future__ import annotations

import numpy as np


def embed_texts(model, kind: str, texts: list[str], max_len: int, batch: int = 256, pool: str = "mean") -> np.ndarray:
    """(N, D) float32 embeddings of ``texts`` by a trained TextJEPA / NextTokenLM (eval mode, CPU);
    ``pool``: the NextTokenLM's pooling (``NextTokenLM.embed``)."""
    import torch

    from captioner.jepa.views import pad, tokenize

    model.eval()
    ids, _ = tokenize(texts, max_len, warn=False)
    out = []
    with torch.no_grad():
        for i in range(0, len(ids), batch):
            x, m = pad(ids[i: i + batch])
            e = model.embed(x, m, pool=pool) if kind == "ntp" else model.embed(x, m)
            out.append(e.float().numpy())
    return np.concatenate(out).astype(np.float32)


def embed_uint8(model, x, batch: int = 256) -> np.ndarray:
    """(N, D) float32 embeddings of a (N, 3, H, W) uint8 tensor by an ImageJEPA (eval mode, CPU)."""
    import torch

    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            out.append(model.embed(x[i: i + batch].float() / 255.0).float().numpy())
    return np.concatenate(out).astype(np.float32)


def embed_images(model, images, batch: int = 256) -> np.ndarray:
    """(N, D) float32 embeddings of PIL images (already at the model's size) by an ImageJEPA."""
    from captioner.jepa.views import pil_to_uint8

    return embed_uint8(model, pil_to_uint8(images, model.cfg.image_size), batch)
