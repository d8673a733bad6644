"""The pipeline's zero-shot classification and alignment report: ``PipelineZeroShot``, a part of
:class:`captioner.pipeline.Pipeline` (``pipe.zeroshot``) that reads it through its public methods only
(``encoder``, ``bank``, ``serving_rotation``, ``encode_images``, ``train_pairs``, ``lock``)."""
from __future__ import annotations

import time

import numpy as np

from captioner.errors import CaptionerError


def ms_since(t0: float) -> float:
    """Milliseconds since ``time.perf_counter()`` read ``t0``, to 0.01 ms."""
    return round((time.perf_counter() - t0) * 1000.0, 2)


def _latest_scaling_plot() -> str | None:
    """The newest scaling-law plot written by `python -m eval scaling` under the home folder, if any."""
    from captioner.paths import home

    try:
        plots = sorted(home().glob("**/scaling*.png"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return None
    return str(plots[-1]) if plots else None


MAX_HEADS = 32  # zero-shot heads kept per pipeline (the least recently used label list goes first)


class PipelineZeroShot:
    """Zero-shot heads, classifiers and the alignment report of one pipeline."""

    def __init__(self, pipe, max_heads: int = MAX_HEADS):
        from captioner.lru import LRU

        self.pipe = pipe
        self.heads = LRU(max_heads)  # one head per label list and prompts: bounded for a server

    def head(self, labels: list[str], templates: list[str] | None = None, definitions=None,
             mode: str = "templates"):
        """Zero-shot head (C, D_txt) for a label list (cached per labels and prompts)."""
        from captioner.assets import templates as load_templates
        from captioner.zeroshot import LARGE_LABEL_SET, SHORT_TEMPLATES, build_head

        if templates is not None:
            tpl = list(templates)
        else:  # all 80 ImageNet templates, or CLIP's best 7 for a large label set (first-use cost)
            tpl = load_templates("imagenet1k") if len(labels) <= LARGE_LABEL_SET else list(SHORT_TEMPLATES)
        key = (tuple(labels), tuple(tpl), tuple(definitions or ()), mode)
        with self.pipe.lock:
            if key not in self.heads:
                self.heads[key] = build_head(self.pipe.encoder("text"), list(labels), tpl, definitions, mode,
                                              progress=self.pipe.progress)
            return self.heads[key]

    def classifier(self, labels: list[str], rotation: str = "paired", prompt_names: list[str] | None = None,
                   **head_kw):
        from captioner.zeroshot import ZeroShotClassifier, check_labels

        labels = check_labels(labels)
        from captioner.calibration import calibrated_scale

        W = self.head(prompt_names or labels, **head_kw)
        mu = self.pipe.bank().centered()[0]
        return ZeroShotClassifier(labels, W, self.pipe.serving_rotation(rotation), mu=mu,
                                  logit_scale=calibrated_scale(self.pipe, rotation))

    def classify(self, images, labels: list[str], top_k: int = 5, rotation: str = "paired",
                 templates: list[str] | None = None) -> list[dict]:
        """Zero-shot classify images among ``labels``.

        ``templates``: the prompts, each with ``{}`` (or ``{c}``) where the label goes, mean-pooled per class
        (default: the 80 ImageNet templates; CLIP's 7 best of them above 100 labels). The head is cached per
        labels and templates.

        Returns one dict per image: {"labels": [{"label", "prob"}, ... top_k], "timings_ms": {"encode",
        "rotate_retrieve"}}.
        """
        from captioner.zeroshot import check_labels, topk

        labels = check_labels(labels)
        if top_k < 1:
            raise CaptionerError(f"top_k must be >= 1, not {top_k}")
        if templates is not None:
            templates = [templates] if isinstance(templates, str) else list(templates)
            bad = [t for t in templates if not isinstance(t, str) or ("{}" not in t and "{c}" not in t)]
            if not templates or bad:
                raise CaptionerError(f"templates must be a non-empty list of strings with '{{}}' where the label "
                                     f"goes; got {bad[:3] if bad else templates!r}")
        with self.pipe.lock:
            clf = self.classifier(labels, rotation, templates=templates)
            t0 = time.perf_counter()
            X = self.pipe.encode_images(images)
            t_enc = ms_since(t0) / len(X)
            t0 = time.perf_counter()
            P = clf.predict_proba(X)
            t_cls = ms_since(t0) / len(X)
            top = topk(P, top_k)
            return [{"labels": [{"label": labels[j], "prob": float(P[i, j])} for j in top[i]],
                     "timings_ms": {"encode": round(t_enc, 2), "rotate_retrieve": round(t_cls, 2)}}
                    for i in range(len(X))]

    def alignment_report(self, n_perm: int = 20) -> dict:
        """How aligned the two encoders are on the train pairs, against a permutation null.

        Returns {"image_encoder", "text_encoder", "n_pairs", "metrics": {"mutual_knn": {"score", "null_mean",
        "null_std", ...}, "cka": {...}}, "scaling_plot": path or None}.
        """
        from alignment.metrics import permutation_null

        with self.pipe.lock:
            X, Y, _ = self.pipe.train_pairs()
            metrics = {}
            for name in ("mutual_knn", "cka"):
                r = permutation_null(name, X, Y, n_perm=n_perm, seed=0)
                metrics[name] = {k: float(v) for k, v in r.items() if isinstance(v, (int, float, np.floating))}
            return {"image_encoder": self.pipe.image_encoder, "text_encoder": self.pipe.text_encoder, "n_pairs": int(len(X)),
                    "metrics": metrics, "scaling_plot": _latest_scaling_plot()}
