"""The captioner kinds: one registry of names with descriptions, read by ``captioner caption --captioner``,
``captioner eval coco --captioner``, the demo's caption tab and the docs.

A kind says how a caption is made from an image: by the image encoder's own classifier head (no rotation,
no image-caption pair; :mod:`captioner.photocaption`), or through a rotation into text space and then
retrieval from the caption bank, or retrieval plus the text-only decoder (``Pipeline.caption``).

Adding a kind: one ``CaptionerKind`` entry here and the branch that runs it where captions are made
(``captioner/commands/caption.py``, ``captioner/demo.py``), and a test.
"""
from __future__ import annotations

from dataclasses import dataclass

from captioner.errors import CaptionerError


@dataclass(frozen=True)
class CaptionerKind:
    """One registry entry.

    name : the name on the command line and in the demo.
    about : one line for the help and the docs.
    label : the demo's radio-button label.
    uses_rotation : the caption goes through a rotation (``--rotation``) and the caption bank.
    decode : the text-only decoder writes the caption (else it is the top retrieved one, or the class name).
    """

    name: str
    about: str
    label: str
    uses_rotation: bool
    decode: bool


CAPTIONERS: dict[str, CaptionerKind] = {k.name: k for k in (
    CaptionerKind("classifier", "the image encoder's ImageNet head names the subject, no rotation and no "
                                "image-caption pair",
                  "ImageNet classifier (EfficientNet-Lite1's head names it; no rotation, no pair)", False, False),
    CaptionerKind("retrieval", "the top bank caption through --rotation",
                  "Rotation, retrieval (the best bank caption through the rotation and encoders above)", True,
                  False),
    CaptionerKind("decoder", "DeCap + the text-only decoder through --rotation (trains on first use: minutes)",
                  "Rotation + decoder (DeCap through the rotation and encoders above, plus retrieval)", True, True),
)}

# Older names that still resolve: the demo's "rotation" (retrieval plus the decoder, which its "decode"
# box may turn off).
ALIASES = {"rotation": "decoder"}


def captioner_names(uses_rotation: bool | None = None) -> list[str]:
    """The registered names (click choices read them): all, or those that do / do not use a rotation."""
    return [n for n, k in CAPTIONERS.items() if uses_rotation is None or k.uses_rotation == uses_rotation]


def get_captioner(name: str, known=None) -> CaptionerKind:
    """The kind called ``name`` (or an alias of it); a one-line error listing ``known`` (default: all)."""
    known = list(CAPTIONERS) if known is None else list(known)
    kind = CAPTIONERS.get(ALIASES.get(name, name)) if isinstance(name, str) else None
    if kind is None or (name not in known and kind.name not in known):
        shown = name[:80] if isinstance(name, str) else type(name).__name__
        raise CaptionerError(f"unknown captioner {shown!r}; choose one of {', '.join(known)}")
    return kind


def help_text(names=None) -> str:
    """``name: about; ...`` for a click option's help."""
    return "; ".join(f"{n}: {CAPTIONERS[n].about}" for n in (names or CAPTIONERS)) + "."


__all__ = ["ALIASES", "CAPTIONERS", "CaptionerKind", "captioner_names", "get_captioner", "help_text"]
