"""Classifier heads of image encoders: the ``head`` rotation's only link between the two modalities
(the rotation itself is fitted in ``captioner.rotations``).

``classifier_head(encoder)`` returns the linear head (W (C, D), b (C,)) that the encoder's embedding feeds,
and the C class names, or raises a CaptionerError naming the encoders that have one. An encoder class can
provide its own by defining ``classifier_head() -> (W, b, names)``.
"""
from __future__ import annotations

import numpy as np

from captioner.errors import CaptionerError

HEAD_PROMPT = "a photo of a {c}."  # one template: all 7 of CLIP's best cost 7x the time for no gain on val


def has_classifier_head(encoder) -> bool:
    """Whether ``encoder`` has a head :func:`classifier_head` can read (without copying its weights)."""
    if callable(getattr(encoder, "classifier_head", None)):
        return True
    from captioner.encoders.offline import EfficientNetLite0

    return isinstance(encoder, EfficientNetLite0)


def classifier_head(encoder) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(W (C, D) float32, b (C,) float32, class names) of ``encoder``'s classifier head."""
    own = getattr(encoder, "classifier_head", None)
    if callable(own):
        W, b, names = own()
    else:
        from captioner.encoders.offline import EfficientNetLite0

        if not isinstance(encoder, EfficientNetLite0):
            raise CaptionerError(
                f"{getattr(encoder, 'name', encoder)!r} has no classifier head to make pseudo-pairs from (the "
                "'head' rotation needs one: efficientnet-lite0 has its ImageNet-1k head); use the 'pairfree' "
                "matcher or 'paired' Procrustes instead")
        from captioner.assets import classnames

        fc = encoder.model._fc  # efficientnet_pytorch: extract_features -> mean pool -> dropout -> _fc
        W = fc.weight.detach().cpu().float().numpy()
        b = fc.bias.detach().cpu().float().numpy()
        names = classnames("imagenet1k")
    W, b = np.asarray(W, np.float32), np.asarray(b, np.float32)
    if W.ndim != 2 or W.shape[1] != encoder.dim or b.shape != (W.shape[0],) or len(names) != W.shape[0]:
        raise CaptionerError(f"{encoder.name}: classifier head of shape W {W.shape}, b {b.shape} with "
                             f"{len(names)} names does not fit {encoder.dim}-d embeddings")
    return W, b, list(names)
