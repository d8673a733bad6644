"""The JEPA world's trained encoders in the registry: ``world-image-jepa``, ``world-text-jepa``,
``world-ntp`` (mean-pooled), ``world-ntp-last`` (last token) and ``world-untrained``, each optionally with
``?seed=N&preset=P`` (default seed 0, the trained preset found: lab, gpu, then quick). They resolve to the
checkpoints ``captioner world train`` keeps under ``<home>/world/<preset>-s<seed>``."""
from __future__ import annotations


def world_encoder(name: str, device: str = "cpu", preset: str | None = None, seed: int = 0, **kw):
    """The JEPAEncoder of world encoder ``name``; a one-line error naming the training command when its
    checkpoint is absent or was trained on another world or seed."""
    from captioner.jepa.encoder import JEPAEncoder
    from captioner.world.models import checkpoint_for

    path, pool = checkpoint_for(name, preset, int(seed))
    enc = JEPAEncoder(path, device=device, pool=pool, **kw)
    enc.name = name if preset is None and not seed else f"{name}?preset={preset or ''}&seed={seed}"
    return enc
