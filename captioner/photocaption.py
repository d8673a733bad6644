"""The ``classifier`` captioner: caption a photo through the image encoder's own ImageNet classifier head.

No rotation and no image-caption pair: the head gives class probabilities p (it was trained on ImageNet's
image-label pairs, which is the only supervision involved); the caption is "A photo of a <top-1 class>.", and
the alternatives are the bank captions nearest to the class query sum_c p_c t_c - mean_c t_c, the probability-
weighted embeddings of the class prompts "a photo of a <class>." around their own mean, compared with the bank
captions around theirs (``captioner.retrieval.retrieve``). Without the two centrings every query shares the
prompts' common component, and the bank captions nearest that component ("A photo of an apiary.", "A photo of a
photocopier.") come back for any photo the head is unsure of. It was the best of the candidates measured on
the GCompris and openclipart validation photos (``python -m eval photos-val``; docs/results/captions.md).
"""
from __future__ import annotations

import functools
import re
import time

import numpy as np

# The classifier captioner's image encoder when none is named: of EfficientNet-Lite0 / -Lite1 / -Lite2 (and
# their averaged probabilities), Lite1's top-1 class named the subject of the validation photos most often
# (GCompris 0.512 / openclipart 0.085 vs Lite0 0.405 / 0.064; docs/results/captions.md).
CLASSIFIER_ENCODER = "efficientnet-lite1"
POOL_PER_ALTERNATIVE = 8  # candidates ranked per alternative asked for, before copies are skipped


def name_caption(name: str) -> str:
    """The classifier captioner's caption of class ``name``: "A photo of a <class>." ("an" before a vowel)."""
    from captioner.subject import article

    return f"A photo of {article(name)} {name}."


def shown_caption(result: dict) -> str:
    """A caption as the CLI and the demo show it: the classifier captioner's with how sure its head is
    ("A photo of a football helmet.  (class probability 0.11)"), any other as it is."""
    p = result.get("class_prob")
    return result["caption"] if p is None else f"{result['caption']}  (class probability {p:.2f})"


def classifier_queries(pipe, X: np.ndarray) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(class queries (N, D_txt), class names, probabilities (N, C)) from the image encoder's classifier head.

    A query is sum_c p_c t_c - mean_c t_c: a direction around the class prompts' mean (see the module
    docstring); :func:`classifier_retrieve` compares it with the bank's captions around their own mean."""
    from alignment.pseudo import softmax
    from captioner.encoders.heads import HEAD_PROMPT

    W, b, names = cached_head(pipe.encoder("image"))
    P = softmax(X @ W.T + b)
    T = pipe.head(names, templates=[HEAD_PROMPT])  # (C, D) class prompt embeddings, cached
    return (P @ T - T.mean(0)).astype(np.float32), names, P


@functools.lru_cache(maxsize=1)
def _template_patterns() -> list:
    """The 80 ImageNet prompt templates as patterns that capture the name ("a (?:a|an) (.+)"), longest first
    ("a photo of the hard to see {c}" before "a photo of the {c}")."""
    from captioner.assets import templates
    from captioner.bank import normalize_caption

    pats = []
    for t in sorted({normalize_caption(t) for t in templates("imagenet1k")}, key=len, reverse=True):
        pre, post = t.replace("{}", "{c}").split("{c}")
        words = pre.split()
        art = words and words[-1] in ("a", "an")
        head = " ".join(words[:-1] if art else words)
        pre = (re.escape(head + " ") if head else "") + ("(?:a|an) " if art else "")
        pats.append(re.compile(f"^{pre}(.+?){re.escape(post)}$"))
    return pats


def template_core(caption: str) -> str:
    """What a caption names once a prompt template and the article are taken off: "A photo of an espresso.",
    "An espresso." and "a sketch of the espresso." all give "espresso"; any other caption is itself (lower case,
    no final punctuation, no leading article).

    >>> [template_core(c) for c in ("A photo of an espresso.", "An espresso.", "a bad photo of the moped.")]
    ['espresso', 'espresso', 'moped']
    >>> template_core("Egyptian Mau, a domestic cat of Egypt.")
    'egyptian mau, a domestic cat of egypt'
    """
    from captioner.bank import normalize_caption

    c = normalize_caption(caption)
    for p in _template_patterns():
        m = p.match(c)
        if m:
            c = m.group(1)
            break
    return re.sub(r"^(a|an|the|some)\s+", "", c)


def classifier_retrieve(Q: np.ndarray, bank, top_k: int = 5, copies: bool = False):
    """(idx, centred cosines), N lists of ``top_k`` each: the bank captions nearest to the class queries ``Q``
    of :func:`classifier_queries`, both sides around their own mean. Unless ``copies``, a caption that names
    what one listed above it names under another template (:func:`template_core`) is skipped: the bank holds
    each class name in several templates, and five wordings of "a moped" are one answer."""
    from captioner.retrieval import distinct, retrieve

    idx, sc = retrieve(Q + bank.centered()[0], bank, top_k if copies else POOL_PER_ALTERNATIVE * top_k)
    if copies:
        return idx.tolist(), sc.tolist()
    return distinct(idx, sc, lambda j: template_core(bank.texts[j]), top_k)


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
    t0 = time.perf_counter()
    X = pipe.encode_images(images)
    t_enc = (time.perf_counter() - t0) * 1000 / len(X)
    t0 = time.perf_counter()
    Q, names, P = classifier_queries(pipe, X)
    bank = pipe.caption_bank()
    idx, S = classifier_retrieve(Q, bank, top_k)
    t_ret = (time.perf_counter() - t0) * 1000 / len(X)
    out = []
    for i in range(len(X)):
        c = names[int(P[i].argmax())]
        out.append({"caption": name_caption(c), "class_prob": round(float(P[i].max()), 4),
                    "retrieved": [{"caption": bank.texts[j], "score": float(s)} for j, s in zip(idx[i], S[i])],
                    "timings_ms": {"encode": round(t_enc, 2), "rotate_retrieve": round(t_ret, 2), "decode": 0.0,
                                   "per": "image (batch average)"}})
    return out


class ClassifierCaptioner:
    """The classifier captioner as a server holds it: ``captioner(images, top_k)`` -> caption dicts
    (:func:`classifier_captions`) on its own pipeline (:data:`CLASSIFIER_ENCODER`, ``text_encoder``, the
    ``default`` bank), built on first use and shared by the calls, one at a time. The demo's caption tab uses
    it beside its rotation pipeline, whose image encoder and bank are the rotations' (Lite0, Tux Paint train).

    ``factory(image_encoder=, text_encoder=, device=, progress=, bank=)`` builds the pipeline (the demo passes
    its pipeline's class); ``bank`` as ``captioner caption --bank`` takes it."""

    def __init__(self, factory, text_encoder: str = "minilm-l6", device: str = "cpu", bank: str = "default",
                 progress: bool = False):
        import threading

        self.factory, self.text_encoder, self.device, self.bank = factory, text_encoder, device, bank
        self.progress = progress  # progress bars while the bank is embedded (a home `make eval` did not fill)
        self._pipe = None
        self._lock = threading.Lock()

    def pipeline(self):
        """The pipeline (built on the first call)."""
        with self._lock:
            if self._pipe is None:
                self._pipe = self.factory(image_encoder=CLASSIFIER_ENCODER, text_encoder=self.text_encoder,
                                          device=self.device, progress=self.progress, bank=self.bank)
            return self._pipe

    def warmup(self) -> None:
        """Caption a blank image now, so that every lazy step (the encoder, its head, the class prompts, the
        bank: embedded once, or read from the cache that `make eval` fills) is done before the first caption."""
        from PIL import Image

        self([Image.new("RGB", (32, 32), (255, 255, 255))], top_k=1)

    def __call__(self, images, top_k: int = 5) -> list[dict]:
        pipe = self.pipeline()
        with self._lock:
            return classifier_captions(pipe, images, top_k=top_k)
