"""Pseudo-pairs from a classifier head: a rotation with no image-text pair from the data.

An image encoder trained as a classifier (EfficientNet-Lite0 on ImageNet-1k) carries a linear head
W (C, D_x), b (C,) whose classes have names. The text encoder embeds those names (C, D_y). For each
unlabelled image x the head's softmax p(c | x) at temperature ``tau`` gives a soft text target

    t(x) = sum_c p(c | x) e_c,         e_c = the L2-normalised embedding of class c's prompt,

and orthogonal Procrustes between the images and their targets gives the rotation. No caption of any
image is used: the only link between the modalities is the encoder's own label vocabulary, which the
image encoder brought with it (as a contrastive text encoder brings its sentence pairs).

Pure math: arrays in, a :class:`~alignment.procrustes.Rotation` out.

Example
-------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> E = np.linalg.qr(rng.standard_normal((16, 8)))[0].T      # 8 orthonormal class embeddings (8, 16)
>>> Q = np.linalg.qr(rng.standard_normal((16, 16)))[0]
>>> labels = rng.integers(0, 8, 200)
>>> X = E[labels] @ Q.T                                       # images: their class embedding, rotated
>>> logits = 50.0 * np.eye(8)[labels]                         # a confident head
>>> rot = fit_head_rotation(X, logits, E, temperature=1.0, center=False)
>>> bool(np.allclose(rot.transform(X), E[labels], atol=1e-4))
True
"""
from __future__ import annotations

import numpy as np

from alignment._checks import as_matrix
from alignment.errors import AlignmentError
from alignment.maps import HeadQueryMap, softmax
from alignment.procrustes import Rotation, fit_procrustes

DEFAULT_TEMPERATURE = 4.0  # chosen on the Tux Paint val split among 1, 2, 4, 8 (README, eval/experiments/alignment_realdata)


def pseudo_targets(logits, class_embeddings, temperature: float = DEFAULT_TEMPERATURE) -> np.ndarray:
    """Soft text targets (N, D_y): the head's class probabilities times the L2-normalised class embeddings.

    Parameters
    ----------
    logits : (N, C) the classifier head's outputs for N images
    class_embeddings : (C, D_y) text embeddings of the C class names, in the head's class order
    temperature : softens the head (higher: the target mixes more classes)
    """
    L = as_matrix(logits, "logits", min_rows=1, allow_constant=True)
    E = as_matrix(class_embeddings, "class_embeddings", min_rows=2)
    if L.shape[1] != E.shape[0]:
        raise AlignmentError(f"the head has {L.shape[1]} classes but {E.shape[0]} class embeddings were given")
    En = E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)
    return (softmax(L, temperature) @ En.astype(np.float64)).astype(np.float32)


def fit_head_rotation(X, logits, class_embeddings, temperature: float = DEFAULT_TEMPERATURE,
                      center: bool = True, text_mean=None, **meta) -> Rotation:
    """Orthogonal Procrustes between images ``X`` (N, D_x) and their head pseudo-targets.

    ``logits`` (N, C) are the head's outputs for the rows of ``X``; ``class_embeddings`` (C, D_y) the text
    embeddings of the classes. Returns a Rotation (method "head") whose ``meta["fit"]["head"]`` records the
    temperature, the class count and the mean top-1 probability (how confident the head was).

    ``text_mean`` (D_y,): where the rotated images should be centred in text space, e.g. the mean of the
    caption bank they will be compared with (no pairs needed to know it). Default: the mean of the targets,
    which is the mean of class-name prompts, not of captions.
    """
    X = as_matrix(X, "X", min_rows=2)
    L = as_matrix(logits, "logits", min_rows=2, allow_constant=True)
    if len(L) != len(X):
        raise AlignmentError(f"{len(X)} images but {len(L)} rows of logits")
    T = pseudo_targets(L, class_embeddings, temperature)
    rot = fit_procrustes(X, T, center=center, **meta)
    rot.method = "head"
    if text_mean is not None:
        mu = np.asarray(text_mean, np.float64).reshape(-1)
        if mu.shape != rot.mean_y.shape or not np.all(np.isfinite(mu)):
            raise AlignmentError(f"text_mean must be a finite ({rot.mean_y.shape[0]},) vector, got {mu.shape}")
        rot.mean_y = mu.astype(rot.mean_y.dtype)
    P = softmax(L, temperature)
    rot.meta.setdefault("fit", {})["head"] = {
        "temperature": float(temperature), "classes": int(L.shape[1]), "images": int(len(X)),
        "mean_top1_prob": round(float(P.max(1).mean()), 4),
        "distinct_top1": int(len(np.unique(L.argmax(1)))),
    }
    return rot


def with_head_query(rot: Rotation, head_W, head_b, class_embeddings, weight: float = 0.5,
                    temperature: float = 1.0) -> HeadQueryMap:
    """``rot`` (a head rotation) with the classifier's own class query added (:class:`HeadQueryMap`): its
    transform returns the direction of the rotated image plus ``weight`` times that of the head's
    probability-weighted class prompts (softmax at ``temperature``), at the rotated image's length."""
    W = as_matrix(head_W, "head_W", min_rows=2, allow_constant=True)
    E = as_matrix(class_embeddings, "class_embeddings", min_rows=2)
    if not weight >= 0 or not temperature > 0:
        raise AlignmentError(f"weight must be >= 0 and temperature > 0, not {weight} and {temperature}")
    En = E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)
    meta = {**rot.meta, "head_query": {"weight": float(weight), "temperature": float(temperature)}}
    return HeadQueryMap(method=rot.method, mean_x=rot.mean_x, mean_y=rot.mean_y, R=rot.R, proj_x=rot.proj_x,
                        proj_y=rot.proj_y, scale=rot.scale, meta=meta, head_W=W.astype(np.float32),
                        head_b=np.asarray(head_b, np.float32).reshape(-1), class_E=En.astype(np.float32))


__all__ = ["DEFAULT_TEMPERATURE", "softmax", "pseudo_targets", "fit_head_rotation", "with_head_query"]
