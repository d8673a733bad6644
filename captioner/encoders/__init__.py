"""Encoders: ``get_encoder(name) -> Encoder`` with ``encode(batch) -> (N, D) float32``.

The names are those of the registry (``captioner.encoders.registry.ENCODERS``, one ``EncoderSpec`` each):
the embedded offline encoders (``efficientnet-lite0`` / ``-lite1`` / ``-lite2``, with ``@k`` for the
mean-pooled output of MBConv block k; ``minilm-l6``, ``minilm-l3``, ``mpnet``, ``smollm2-135m``), the JEPA
world's ``world-*``, and the prefixes ``hf-image:<hub id or path>``, ``hf-text:<hub id or path>`` and
``jepa:<checkpoint path>`` for encoders trained by ``captioner train``. ``?key=value&...`` after a name
passes options to its loader.
"""
from __future__ import annotations

from captioner.encoders.base import Encoder
from captioner.encoders.registry import ENCODERS, EncoderSpec, find_spec, register_encoder, unregister_encoder
from captioner.errors import CaptionerError

DEFAULT_IMAGE = "efficientnet-lite0"
DEFAULT_TEXT = "minilm-l6"

_CACHE: dict = {}


def list_encoders() -> list[dict]:
    """The registered names with their modality and a one-line description, plus trained checkpoints."""
    rows = [{"name": s.name + ("..." if s.prefix else ""), "modality": s.modality, "about": s.about}
            for s in ENCODERS.values()]
    try:
        from captioner.paths import home

        for ckpt in sorted((home() / "checkpoints").glob("*/config.json")):
            rows.append({"name": f"jepa:{ckpt.parent}", "modality": "?", "about": "trained checkpoint"})
    except OSError:
        pass
    return rows


def parse_name(name: str) -> tuple[str, dict]:
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
    base, kw = parse_name(name)
    kw.update(kwargs)
    spec, arg = find_spec(base)
    enc = spec.loader()(arg, device=device, name=name, **kw)
    if cache:
        _CACHE[key] = enc
    return enc


__all__ = ["DEFAULT_IMAGE", "DEFAULT_TEXT", "ENCODERS", "Encoder", "EncoderSpec", "check_device", "get_encoder",
           "list_encoders", "parse_name", "register_encoder", "unregister_encoder"]
