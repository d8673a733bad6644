"""The ``classifier`` captioner: caption a photo through the image encoder's own ImageNet classifier head.

No rotation and no image-caption pair: the head gives class probabilities p (it was trained on ImageNet's
image-label pairs, which is the only supervision involved); the caption is "A photo of a <top-1 class>.", and
the alternatives are the bank captions nearest (cosine in text space) to sum_c p_c t_c, the probability-
weighted embeddings of the class prompts "a photo of a <class>.". It was the best of the candidates measured on
the GCompris and openclipart validation photos (``python -m eval.photos_val``; docs/results/captions.md).
"""
from __future__ import annotations

import time

import numpy as np

# The classifier captioner's image encoder when none is named: of EfficientNet-Lite0 / -Lite1 / -Lite2 (and
# their averaged probabilities), Lite1's top-1 class named the subject of the validation photos most often
# (GCompris 0.512 / openclipart 0.085 vs Lite0 0.405 / 0.064; docs/results/captions.md).
CLASSIFIER_ENCODER = "efficientnet-lite1"


def name_caption(name: str) -> str:
    """The classifier captioner's caption of class ``name``: "A photo of a <class>." ("an" before a vowel)."""
    from captioner.subject import article

    return f"A photo of {article(name)} {name}."


def classifier_queries(pipe, X: np.ndarray) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(text queries (N, D_txt), class names, probabilities (N, C)) from the image encoder's classifier head."""
    from alignment.pseudo import softmax
    from captioner.encoders.heads import HEAD_PROMPT

    W, b, names = cached_head(pipe.encoder("image"))
    P = softmax(X @ W.T + b)
    T = pipe.head(names, templates=[HEAD_PROMPT])  # (C, D) class prompt embeddings, cached
    return (P @ T).astype(np.float32), names, P


def cached_head(encoder) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``classifier_head(encoder)`` kept under ``$CAPTIONER_HOME/heads`` (keyed by the encoder's fingerprint), so
    a warm call reads two arrays instead of building the torch model the head lives in."""
    import hashlib
    import json

    from captioner.encoders.heads import classifier_head
    from captioner.paths import subdir

    key = hashlib.sha256(json.dumps(encoder.fingerprint(), sort_keys=True, default=str).encode()).hexdigest()[:12]
    path = subdir("heads") / f"{key}.npz"
    try:
        with np.load(path, allow_pickle=False) as z:
            return z["W"], z["b"], [str(n) for n in z["names"]]
    except (OSError, KeyError, ValueError):
        pass
    W, b, names = classifier_head(encoder)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, W=W, b=b, names=np.array(names))
    tmp.replace(path)
    return W, b, names


def classifier_captions(pipe, images, top_k: int = 5) -> list[dict]:
    """Caption dicts as ``Pipeline.caption`` returns them, by the classifier head (see the module docstring);
    ``timings_ms`` are per image (the batch's time divided by its size)."""
    from captioner.bank import l2n

    t0 = time.perf_counter()
    X = pipe.encode_images(images)
    t_enc = (time.perf_counter() - t0) * 1000 / len(X)
    t0 = time.perf_counter()
    Q, names, P = classifier_queries(pipe, X)
    bank = pipe.caption_bank()
    S = l2n(Q) @ bank.E.T
    k = min(top_k, S.shape[1])
    idx = np.argsort(-S, axis=1)[:, :k]
    t_ret = (time.perf_counter() - t0) * 1000 / len(X)
    out = []
    for i in range(len(X)):
        c = names[int(P[i].argmax())]
        out.append({"caption": name_caption(c), "class_prob": round(float(P[i].max()), 4),
                    "retrieved": [{"caption": bank.texts[j], "score": float(S[i, j])} for j in idx[i]],
                    "timings_ms": {"encode": round(t_enc, 2), "rotate_retrieve": round(t_ret, 2), "decode": 0.0,
                                   "per": "image (batch average)"}})
    return out
