"""A deterministic fake of the ``Pipeline`` contract for the demo tests (no model weights, microseconds).

Captions are ranked by how close the image's mean colour is to a colour named in each bank caption, so a
pure red image is "a red fire truck." with score 1.0 under the paired rotation, and 0.9 under pair-free.
"""
from __future__ import annotations

import threading

import numpy as np

BANK = {
    "a red fire truck.": (255, 0, 0),
    "a green frog on a leaf.": (0, 255, 0),
    "a blue sky over the sea.": (0, 0, 255),
    "a white cloud.": (255, 255, 255),
    "a black cat at night.": (0, 0, 0),
    "a yellow banana.": (255, 255, 0),
}
COLOURS = {"red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255), "white": (255, 255, 255),
           "black": (0, 0, 0), "yellow": (255, 255, 0)}
ROTATION_SCALE = {"paired": 1.0, "pairfree": 0.9}


def _mean_rgb(im) -> np.ndarray:
    return np.asarray(im.convert("RGB").resize((16, 16)), dtype=np.float64).reshape(-1, 3).mean(0)  # (3,)


def _closeness(rgb, colour) -> float:
    """1 at the same colour, 0 at the far corner of the RGB cube."""
    return 1.0 - float(np.linalg.norm(rgb - np.asarray(colour, dtype=np.float64))) / (255.0 * np.sqrt(3))


class FakePipeline:
    rotations = ["paired", "pairfree"]

    def __init__(self, image_encoder="fake-image", text_encoder="fake-text", device="cpu", progress=True,
                 scaling_plot=None, fail_with: Exception | None = None):
        self.image_encoder = image_encoder
        self.text_encoder = text_encoder
        self.device = device
        self.scaling_plot = scaling_plot
        self.fail_with = fail_with
        self.warmed = 0
        self.calls = {"caption": 0, "classify": 0, "alignment_report": 0}
        self.last_labels: list[str] | None = None
        self.last_templates: list[str] | None = None
        self._busy = threading.Lock()
        self.overlaps = 0  # calls that found another call running: the demo must serialise them

    @classmethod
    def default(cls, **kw):
        return cls(**kw)

    def _enter(self, what):
        if not self._busy.acquire(blocking=False):
            self.overlaps += 1
            self._busy.acquire()
        self.calls[what] += 1
        if self.fail_with is not None:
            self._busy.release()
            raise self.fail_with

    def warmup(self):
        self.warmed += 1

    def caption(self, images, top_k=5, rotation="paired", decode=True):
        self._enter("caption")
        try:
            s = ROTATION_SCALE[rotation]
            out = []
            for im in images:
                rgb = _mean_rgb(im)
                ranked = sorted(BANK, key=lambda c: -_closeness(rgb, BANK[c]))
                retrieved = [{"caption": c, "score": s * _closeness(rgb, BANK[c])} for c in ranked[:top_k]]
                cap = f"decoded: {ranked[0]}" if decode else ranked[0]
                out.append({"caption": cap, "retrieved": retrieved,
                            "timings_ms": {"encode": 1.0, "rotate_retrieve": 0.5, "decode": 2.0 if decode else 0.0}})
            return out
        finally:
            self._busy.release()

    def classify(self, images, labels, top_k=5, rotation="paired", templates=None):
        self._enter("classify")
        try:
            self.last_labels = list(labels)
            self.last_templates = templates
            out = []
            for im in images:
                rgb = _mean_rgb(im)
                logits = np.array([20.0 * _closeness(rgb, COLOURS[lab]) if lab in COLOURS else 0.0
                                   for lab in labels])
                p = np.exp(logits - logits.max())
                p /= p.sum()
                order = np.argsort(-p, kind="stable")[:top_k]
                out.append({"labels": [{"label": labels[i], "prob": float(p[i])} for i in order],
                            "timings_ms": {"encode": 1.0, "rotate_retrieve": 0.5}})
            return out
        finally:
            self._busy.release()

    def alignment_report(self, n_perm=20):
        self._enter("alignment_report")
        try:
            return {"image_encoder": self.image_encoder, "text_encoder": self.text_encoder, "n_pairs": 150,
                    "metrics": {"mutual_knn": {"score": 0.42, "null_mean": 0.05, "null_std": 0.01},
                                "cka": {"score": 0.61, "null_mean": 0.21, "null_std": 0.02}},
                    "scaling_plot": self.scaling_plot}
        finally:
            self._busy.release()


class FakePipelineNoTemplates(FakePipeline):
    """The bare contract: classify() without the optional ``templates=``."""

    def classify(self, images, labels, top_k=5, rotation="paired"):
        return super().classify(images, labels, top_k=top_k, rotation=rotation)
