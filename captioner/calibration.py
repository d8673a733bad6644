"""Temperature of zero-shot probabilities, fitted on a validation split (issue 20: "car 0.380, dog 0.377, cat
0.243" for a cat photo, and 1.000 / 0.000 elsewhere, with one fixed CLIP scale for every rotation).

``fit_logit_scale`` picks the scale s of softmax(s * cos) that minimises the negative log-likelihood of the true
classes on validation images (bounded search on log s). ``Pipeline.classifier`` uses ``calibrated_scale``: fitted
once per rotation on the Tux Paint val split (its categories as classes, never the test split) and cached under
``$CAPTIONER_HOME/calibration``.
"""
from __future__ import annotations

import json

import numpy as np

SCALE_RANGE = (1.0, 1000.0)


def _nll(scale: float, C: np.ndarray, y: np.ndarray) -> float:
    L = scale * C
    L = L - L.max(1, keepdims=True)
    return float(np.mean(np.log(np.exp(L).sum(1)) - L[np.arange(len(y)), y]))


def fit_logit_scale(C: np.ndarray, y: np.ndarray) -> float:
    """The scale s minimising mean NLL of softmax(s * C) at labels ``y``. C: (N, K) cosines; y: (N,) ints."""
    from scipy.optimize import minimize_scalar

    C, y = np.asarray(C, np.float64), np.asarray(y, np.int64)
    lo, hi = np.log(SCALE_RANGE[0]), np.log(SCALE_RANGE[1])
    r = minimize_scalar(lambda t: _nll(float(np.exp(t)), C, y), bounds=(lo, hi), method="bounded",
                        options={"xatol": 1e-6})
    return float(np.exp(r.x))


def calibrated_scale(pipe, rotation: str) -> float:
    """The logit scale for ``rotation`` fitted on the Tux Paint val split (cached); the default scale when the
    split or the rotation cannot be had."""
    from captioner.bank import l2n
    from captioner.cache import embed
    from captioner.datasets import get_dataset
    from captioner.errors import CaptionerError
    from captioner.paths import subdir
    from captioner.zeroshot import DEFAULT_LOGIT_SCALE, TUXPAINT_CLASSNAMES

    try:
        key = pipe.artifact_key(f"calibration-{rotation}")
        path = subdir("calibration") / f"{rotation}-{key}.json"
        if path.exists():
            return float(json.loads(path.read_text())["logit_scale"])
        val = get_dataset("tuxpaint", split="val")
        labels = sorted({s.label for s in val.samples})
        W = l2n(pipe.head([TUXPAINT_CLASSNAMES.get(c, c) for c in labels]))
        es = embed(pipe.encoder("image"), val, "image", progress=pipe.progress)
        by_id = {s.id: s.label for s in val.samples}
        y = np.array([labels.index(by_id[i]) for i in es.sample_ids])
        Q = pipe.text_queries(es.X, rotation) - pipe.bank().centered()[0]
        s = fit_logit_scale(l2n(Q) @ W.T, y)
    except CaptionerError:
        return DEFAULT_LOGIT_SCALE
    from captioner.paths import atomic_write_json

    atomic_write_json(path, {"logit_scale": s, "rotation": rotation, "fitted_on": "tuxpaint/val",
                             "n_images": int(len(y)), "n_classes": len(labels)})
    return s
