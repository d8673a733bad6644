"""The JEPA world's trained encoders in the registry: ``world-image-jepa``, ``world-text-jepa``,
``world-ntp`` (mean-pooled), ``world-ntp-last`` (last token) and ``world-untrained``, each optionally with
``?seed=N&preset=P`` (default seed 0, the trained preset found: lab, gpu, then quick) and ``&scenes=train``
(encoders trained on the seed's train scenes only: ``captioner world train --scenes train``). They resolve to the
checkpoints ``captioner world train`` keeps under ``<home>/world/<preset>-s<seed>``. Their rows are unit-length,
the space ``python -m eval world report`` measures in: the pipeline on the world (``captioner eval coco --dataset
world``, the demo) then fits and applies its maps where the report does (the lattice matcher, fitted on the raw
rows, found a worse map for seed 1: colour zero-shot 46 % against 80 % on unit rows)."""
from __future__ import annotations


def world_encoder(name: str, device: str = "cpu", preset: str | None = None, seed: int = 0, scenes: str = "all",
                  **kw):
    """The JEPAEncoder of world encoder ``name``; a one-line error naming the training command when its
    checkpoint is absent or was trained on another world or seed."""
    from captioner.jepa.encoder import JEPAEncoder
    from captioner.world.models import checkpoint_for

    path, pool = checkpoint_for(name, preset, int(seed), scenes)
    enc = JEPAEncoder(path, device=device, pool=pool, normalize=True, **kw)
    enc.name = name if preset is None and not seed else f"{name}?preset={preset or ''}&seed={seed}"
    if scenes != "all":
        enc.name += f"{'&' if '?' in enc.name else '?'}scenes={scenes}"
    if name != "world-image-jepa":   # a text encoder: words it never saw in training are refused, not embedded
        raw = enc.encode

        def encode(items, *args, **kwargs):
            from captioner.errors import CaptionerError
            from captioner.world.scenes import unknown_words

            bad = unknown_words(items)
            if bad:
                raise CaptionerError(f"{name} never saw the word{'s' if len(bad) > 1 else ''} "
                                     f"{', '.join(repr(w) for w in bad[:5])} in training: the world's captions use "
                                     "only its own words (captioner/world/scenes.py: NOUNS, TEMPLATES, VALUE_WORDS); "
                                     "rephrase with them, e.g. 'a small red disc on the left'")
            return raw(items, *args, **kwargs)

        enc.encode = encode
    return enc


def load_world(arg: str, device: str = "cpu", name: str | None = None, **kw):
    """Registry loader (``captioner.encoders.registry``) of the ``world-*`` names."""
    return world_encoder(arg, device=device, **kw)
