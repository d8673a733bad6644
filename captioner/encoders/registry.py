"""The encoder registry: one ``EncoderSpec`` per name (or name prefix), read by ``get_encoder``,
``captioner encoders``, the demo's dropdowns and the docs.

A spec names its loader as ``"module:function"``, imported on first use, so that listing the encoders
imports no model code. A loader is called as ``load(arg, device=device, name=name, **options)`` and
returns an :class:`captioner.encoders.base.Encoder`: ``arg`` is the registry name itself for a plain
entry, what follows the prefix for a prefix entry (``"hf-image:google/vit"`` -> ``"google/vit"``), and
``name`` the whole name asked for (query options and ``@layer`` included).

Adding an encoder: its class and loader in a file of its own under ``captioner/encoders/``, one
``EncoderSpec`` line in ``SPECS`` below (or ``register_encoder(spec)`` from a plug-in), and a test.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from captioner.errors import CaptionerError


@dataclass(frozen=True)
class EncoderSpec:
    """One registry entry.

    name : the registry name (``"minilm-l6"``), or a prefix ending in ``":"`` (``"hf-image:"``) that
        takes a hub id, a path or a world name after it.
    modality : "image", "text" or "any" (a prefix whose models may be either).
    load : ``"module:function"`` (imported on first use) or the callable itself.
    dim : output width D of ``encode`` (None: depends on the model or the checkpoint).
    about : one line for ``captioner encoders`` and the docs.
    group : "offline" (the embedded packages), "world" (``captioner world train``) or "prefix".
    """

    name: str
    modality: str
    load: str | Callable
    dim: int | None
    about: str
    group: str = "offline"

    @property
    def prefix(self) -> bool:
        return self.name.endswith(":")

    def loader(self) -> Callable:
        if callable(self.load):
            return self.load
        module, _, attr = self.load.partition(":")
        return getattr(importlib.import_module(module), attr)


_LITE = "ImageNet-supervised CNN"
SPECS = (
    EncoderSpec("efficientnet-lite0", "image", "captioner.encoders.offline:load_efficientnet", 1280,
                f"EfficientNet-Lite0, {_LITE}, 1280-d (offline package)"),
    EncoderSpec("efficientnet-lite1", "image", "captioner.encoders.offline:load_efficientnet", 1280,
                f"EfficientNet-Lite1, {_LITE}, 240 px, 1280-d (offline package)"),
    EncoderSpec("efficientnet-lite2", "image", "captioner.encoders.offline:load_efficientnet", 1280,
                f"EfficientNet-Lite2, {_LITE}, 260 px, 1280-d (offline package)"),
    EncoderSpec("minilm-l6", "text", "captioner.encoders.text_onnx:load_minilm_l6", 384,
                "all-MiniLM-L6-v2, contrastive sentence encoder, 384-d (offline package)"),
    EncoderSpec("minilm-l3", "text", "captioner.encoders.offline:load_minilm_l3", 384,
                "paraphrase-MiniLM-L3-v2 ONNX, contrastive, 384-d (offline package)"),
    EncoderSpec("mpnet", "text", "captioner.encoders.offline:load_mpnet", 768,
                "all-mpnet-base-v2, contrastive sentence encoder, 768-d (offline package, 5 parts)"),
    EncoderSpec("smollm2-135m", "text", "captioner.encoders.offline:load_smollm2", 576,
                "SmolLM2-135M next-token LM, mean-pooled hidden states, 576-d (offline package)"),
    # the JEPA world's encoders (``captioner world train``); ``?seed=N&preset=P`` picks a trained world
    EncoderSpec("world-image-jepa", "image", "captioner.encoders.world:load_world", 12,
                "the JEPA world's image JEPA (two renders of a scene), 12-d", "world"),
    EncoderSpec("world-text-jepa", "text", "captioner.encoders.world:load_world", 12,
                "the JEPA world's text JEPA (two captions of a scene), 12-d", "world"),
    EncoderSpec("world-ntp", "text", "captioner.encoders.world:load_world", None,
                "the JEPA world's next-token LM, mean of its final states", "world"),
    EncoderSpec("world-ntp-last", "text", "captioner.encoders.world:load_world", None,
                "the JEPA world's next-token LM, its last token's final state", "world"),
    EncoderSpec("world-untrained", "text", "captioner.encoders.world:load_world", None,
                "the JEPA world's text encoder, untrained (seeded)", "world"),
    EncoderSpec("hf-image:", "image", "captioner.encoders.hf:load_hf_image", None,
                "any Hugging Face vision model by hub id or local path (pooling=cls|mean|proj)", "prefix"),
    EncoderSpec("hf-text:", "any", "captioner.encoders.hf:load_hf_text", None,
                "any Hugging Face text model by hub id or local path (mean pooling; layer= for causal LMs)",
                "prefix"),
    EncoderSpec("jepa:", "any", "captioner.jepa.encoder:load_jepa_encoder", None,
                "a text or image JEPA checkpoint trained by `captioner train`", "prefix"),
)

ENCODERS: dict[str, EncoderSpec] = {s.name: s for s in SPECS}


def register_encoder(spec: EncoderSpec, replace: bool = False) -> EncoderSpec:
    """Add ``spec`` to the registry (a plug-in, or a test's fake); refuses to shadow a name silently."""
    if spec.name in ENCODERS and not replace:
        raise CaptionerError(f"encoder {spec.name!r} is registered already; pass replace=True to replace it")
    ENCODERS[spec.name] = spec
    return spec


def unregister_encoder(name: str) -> None:
    ENCODERS.pop(name, None)


def known_names() -> list[str]:
    """The names for an error message: plain names, then each prefix with a placeholder."""
    return [s.name + "<id or path>" if s.prefix else s.name for s in ENCODERS.values()]


def find_spec(base: str) -> tuple[EncoderSpec, str]:
    """(spec, arg) for a base name (options already parsed off); a one-line error listing the known ones."""
    if base in ENCODERS and not ENCODERS[base].prefix:
        return ENCODERS[base], base
    for spec in ENCODERS.values():
        if spec.prefix and base.startswith(spec.name):
            return spec, base[len(spec.name):]
    raise CaptionerError(f"unknown encoder {base!r}; known: {', '.join(known_names())}")
