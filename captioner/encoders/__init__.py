"""Encoder registry: ``get_encoder(name) -> Encoder`` with ``encode(batch) -> (N, D) float32``.

Names: the embedded offline encoders (``efficientnet-lite0`` / ``-lite1`` / ``-lite2``, with ``@k`` for the
mean-pooled output of MBConv block k; ``minilm-l6``, ``minilm-l3``, ``mpnet``, ``smollm2-135m``), ``hf-image:<hub id or path>``, ``hf-text:<hub id or path>``, and
``jepa:<checkpoint path>`` for encoders trained by ``captioner train``.
"""
from __future__ import annotations

from captioner.encoders.base import Encoder
from captioner.errors import CaptionerError

DEFAULT_IMAGE = "efficientnet-lite0"
DEFAULT_TEXT = "minilm-l6"

OFFLINE = {
    "efficientnet-lite0": ("image", "EfficientNet-Lite0, ImageNet-supervised CNN, 1280-d (offline package)"),
    "efficientnet-lite1": ("image", "EfficientNet-Lite1, ImageNet-supervised CNN, 240 px, 1280-d (offline package)"),
    "efficientnet-lite2": ("image", "EfficientNet-Lite2, ImageNet-supervised CNN, 260 px, 1280-d (offline package)"),
    "minilm-l6": ("text", "all-MiniLM-L6-v2, contrastive sentence encoder, 384-d (offline package)"),
    "minilm-l3": ("text", "paraphrase-MiniLM-L3-v2 ONNX, contrastive, 384-d (offline package)"),
    "mpnet": ("text", "all-mpnet-base-v2, contrastive sentence encoder, 768-d (offline package, 5 parts)"),
    "smollm2-135m": ("text", "SmolLM2-135M next-token LM, mean-pooled hidden states, 576-d (offline package)"),
}
PREFIXES = {
    "hf-image:": "any Hugging Face vision model by hub id or local path (pooling=cls|mean|proj)",
    "hf-text:": "any Hugging Face text model by hub id or local path (mean pooling; layer= for causal LMs)",
    "jepa:": "a text or image JEPA checkpoint trained by `captioner train`",
}

# the JEPA world's encoders (``captioner world train``); ``?seed=N&preset=P`` picks a trained world
WORLD = {
    "world-image-jepa": ("image", "the JEPA world's image JEPA (two renders of a scene), 12-d"),
    "world-text-jepa": ("text", "the JEPA world's text JEPA (two captions of a scene), 12-d"),
    "world-ntp": ("text", "the JEPA world's next-token LM, mean of its final states"),
    "world-ntp-last": ("text", "the JEPA world's next-token LM, its last token's final state"),
    "world-untrained": ("text", "the JEPA world's text encoder, untrained (seeded)"),
}

_CACHE: dict = {}


def list_encoders() -> list[dict]:
    """The registered names with their modality and a one-line description, plus trained checkpoints."""
    rows = [{"name": n, "modality": m, "about": a} for n, (m, a) in OFFLINE.items()]
    rows += [{"name": n, "modality": m, "about": a} for n, (m, a) in WORLD.items()]
    rows += [{"name": p + "...", "modality": "image" if p == "hf-image:" else "any", "about": a}
             for p, a in PREFIXES.items()]
    try:
        from captioner.paths import home

        for ckpt in sorted((home() / "checkpoints").glob("*/config.json")):
            rows.append({"name": f"jepa:{ckpt.parent}", "modality": "?", "about": "trained checkpoint"})
    except OSError:
        pass
    return rows


def _parse(name: str) -> tuple[str, dict]:
    """``"smollm2-135m@6"`` -> ("smollm2-135m", {"layer": 6}); ``"hf-image:x?pooling=mean"`` -> kwargs."""
    kw: dict = {}
    if "?" in name:
        name, q = name.split("?", 1)
        for part in q.split("&"):
            k, _, v = part.partition("=")
            kw[k] = int(v) if v.lstrip("-").isdigit() else v
    if "@" in name and not name.startswith(("hf-", "jepa:")):
        name, layer = name.rsplit("@", 1)
        kw["layer"] = int(layer)
    return name, kw


def check_device(device: str) -> None:
    """Fail early, in one line, on a device this machine does not have."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise CaptionerError(f"device {device!r} asked for, but torch sees no CUDA GPU here; use --device cpu")
    elif device == "mps":
        import torch

        if not torch.backends.mps.is_available():
            raise CaptionerError("device 'mps' asked for, but it is not available; use --device cpu")
    elif device != "cpu":
        raise CaptionerError(f"unknown device {device!r}; use cpu, cuda, cuda:N or mps")


def get_encoder(name: str, device: str = "cpu", cache: bool = True, **kwargs) -> Encoder:
    """Build (or reuse, per process) the encoder called ``name`` on ``device``.

    Raises CaptionerError with the list of known names for an unknown one."""
    key = (name, device, tuple(sorted(kwargs.items())))
    if cache and key in _CACHE:
        return _CACHE[key]
    check_device(device)
    base, kw = _parse(name)
    kw.update(kwargs)
    if base in ("efficientnet-lite0", "efficientnet-lite1", "efficientnet-lite2"):
        from captioner.encoders.offline import EfficientNetLite0 as cls

        kw["variant"] = base
        if "layer" in kw:  # efficientnet-lite0@12: the pooled output of MBConv block 12
            kw["block"] = kw.pop("layer")
    elif base == "mpnet":
        from captioner.encoders.offline import MPNetBase as cls
    elif base == "minilm-l6":
        from captioner.encoders.text_onnx import MiniLML6 as cls
    elif base == "minilm-l3":
        from captioner.encoders.offline import MiniLML3Onnx as cls
    elif base == "smollm2-135m":
        from captioner.encoders.offline import SmolLM2 as cls
    elif base.startswith("hf-image:"):
        from captioner.encoders.hf import HFImageEncoder

        enc = HFImageEncoder(base[len("hf-image:"):], device=device, name=name, **kw)
        cls = None
    elif base.startswith("hf-text:"):
        from captioner.encoders.hf import HFTextEncoder

        enc = HFTextEncoder(base[len("hf-text:"):], device=device, name=name, **kw)
        cls = None
    elif base in WORLD:
        from captioner.encoders.world import world_encoder

        enc = world_encoder(base, device=device, **kw)
        cls = None
    elif base.startswith("jepa:"):
        from captioner.jepa.encoder import load_jepa_encoder

        enc = load_jepa_encoder(base[len("jepa:"):], device=device, **kw)
        cls = None
    else:
        known = ", ".join(list(OFFLINE) + list(WORLD) + [p + "<id or path>" for p in PREFIXES])
        raise CaptionerError(f"unknown encoder {name!r}; known: {known}")
    if cls is not None:
        enc = cls(device=device, **kw)
    if cache:
        _CACHE[key] = enc
    return enc


__all__ = ["DEFAULT_IMAGE", "DEFAULT_TEXT", "Encoder", "get_encoder", "list_encoders"]
