"""Zero-shot classification in text space: a class is the mean of its prompt embeddings (CLIP's recipe:
each prompt embedding L2-normalised, averaged over templates, renormalised); an image is rotated into text
space and scored against every class by cosine.

The pair-free alternative (``cluster_match``) never puts an image and a text side by side: the images are
clustered (k-means, one cluster per class), and the clusters are matched to the classes by comparing the
two similarity structures (cluster centroids in image space vs class embeddings in text space) with the
quadratic-assignment solver, as in the Blind Match benchmark.
"""
from __future__ import annotations

import hashlib

import numpy as np

from captioner.bank import l2n
from captioner.errors import CaptionerError

# Tux Paint's category folders, as words a sentence encoder reads ("naturalforces" is not a word).
TUXPAINT_CLASSNAMES = {
    "animals": "animal", "clothes": "piece of clothing", "food": "food", "hobbies": "hobby item",
    "household": "household object", "medical": "medical item", "military": "military object",
    "naturalforces": "natural force", "people": "person", "plants": "plant", "seasonal": "holiday decoration",
    "space": "space object", "sports": "sports item", "town": "building", "vehicles": "vehicle",
}
# The 7 of the 80 ImageNet templates that CLIP's authors found to ensemble best: used for large label sets
# (1000 classes x 80 templates is 80k sentences to embed on first use; x 7 is 7k).
SHORT_TEMPLATES = ["itap of a {c}.", "a bad photo of the {c}.", "a origami {c}.", "a photo of the large {c}.",
                   "a {c} in a video game.", "art of the {c}.", "a photo of the small {c}."]
LARGE_LABEL_SET = 100
DEFAULT_LOGIT_SCALE = 100.0  # CLIP's learned temperature; cosines here are as spread as CLIP's


def check_labels(labels) -> list[str]:
    """Strip labels and refuse what cannot be a classification: an empty label, fewer than two classes,
    or the same label twice (case and spaces ignored)."""
    if isinstance(labels, str):
        labels = [x for x in labels.split(",")]
    labels = [" ".join(str(x).split()) for x in labels]
    if any(not x for x in labels):
        raise CaptionerError("empty label in the label list; give non-empty class names separated by commas")
    if len(labels) < 2:
        raise CaptionerError(f"zero-shot classification needs at least two classes, got {len(labels)} "
                             f"({labels[0] if labels else ''!r})")
    seen: dict = {}
    for x in labels:
        k = x.lower()
        if k in seen:
            raise CaptionerError(f"duplicate label {x!r} (same as {seen[k]!r}); every class must appear once")
        seen[k] = x
    return labels


def fill(template: str, name: str) -> str:
    return template.replace("{c}", name).replace("{}", name)


def class_prompts(names: list[str], templates: list[str], definitions: list[str | None] | None = None,
                  mode: str = "templates") -> list[list[str]]:
    """The prompts of each class: templates filled with its name, and/or ``"<name>: <definition>."``.

    mode : "templates", "definitions" or "both" (definitions fall back to the templates where missing).
    """
    if mode not in ("templates", "definitions", "both"):
        raise CaptionerError(f"prompt mode must be templates, definitions or both, not {mode!r}")
    out = []
    for i, c in enumerate(names):
        rows = []
        if mode in ("templates", "both"):
            rows += [fill(t, c) for t in templates]
        d = definitions[i] if definitions else None
        if mode in ("definitions", "both") and d:
            rows.append(f"a photo of a {c}, {d.rstrip('.')}.")
        if not rows:
            rows = [fill(t, c) for t in templates]
        out.append(rows)
    return out


def head_from_embeddings(E, counts=None) -> np.ndarray:
    """Class vectors from prompt embeddings: normalise each prompt, mean per class, renormalise.

    Parameters
    ----------
    E : (C, T, D) array (T prompts per class), or (sum(counts), D) with ``counts`` prompts per class in order.

    Returns
    -------
    (C, D) float32 unit rows.
    """
    E = np.asarray(E, np.float32)
    if counts is None:
        if E.ndim != 3:
            raise ValueError("E must be (C, T, D) when counts is not given")
        return l2n(l2n(E).mean(1))
    if E.shape[0] != sum(counts):
        raise ValueError(f"{E.shape[0]} prompt rows but counts sum to {sum(counts)}")
    En = l2n(E)
    bounds = np.cumsum([0] + list(counts))
    return l2n(np.stack([En[a:b].mean(0) for a, b in zip(bounds[:-1], bounds[1:])]))


def build_head(text_encoder, names: list[str], templates: list[str], definitions=None, mode: str = "templates",
               progress: bool = False, device: str = "cpu") -> np.ndarray:
    """Embed every class's prompts with ``text_encoder`` (registry name or Encoder) through the embedding
    cache, and return the zero-shot head (C, D)."""
    from captioner.bank import text_dataset
    from captioner.cache import embed
    from captioner.encoders import get_encoder

    enc = get_encoder(text_encoder, device=device) if isinstance(text_encoder, str) else text_encoder
    prompts = class_prompts(names, templates, definitions, mode)
    flat = [p for rows in prompts for p in rows]
    key = hashlib.sha256("\x00".join(flat).encode()).hexdigest()[:10]
    if len(flat) <= 64:  # a handful of prompts (the demo, a CLI label list): not worth a cache file
        X = enc.encode(flat)
    else:
        es = embed(enc, text_dataset("prompts", key, flat), "text", progress=progress)
        # The cache returns rows in dataset order ("t<i>#0"); check that, since averaging relies on it.
        assert es.ids == [f"t{i}#0" for i in range(len(flat))], "prompt cache rows out of order"
        X = es.X
    return head_from_embeddings(X, [len(r) for r in prompts])


CAPTION_WEIGHT = 1.0  # chosen on Tux Paint train (own caption left out) + val: docs/results/pairfree-real.md


def described_by_captions(W: np.ndarray, labels: list[str], samples, bank, weight: float = CAPTION_WEIGHT
                          ) -> np.ndarray:
    """Class vectors that the train split's captions of each class describe too (text only: no image is
    read, only which class each caption's sample belongs to).

    Each side is taken as a direction around the caption bank's mean, the frame the rotated queries are
    compared in: the prompt vector ``W[k] - mean`` and the mean of the unit caption directions of the
    samples labelled ``labels[k]``, each unit-normalised, summed with ``weight`` on the captions. Only the
    captions in ``bank`` count, so a bank built without the test captions (the pipeline's) keeps them out;
    a class with no caption keeps its prompt vector.

    >>> from captioner.bank import CaptionBank
    >>> from types import SimpleNamespace as S
    >>> bank = CaptionBank(["a red car.", "a blue car.", "a cat."], np.eye(3, dtype=np.float32), {})
    >>> samples = [S(label="car", captions=["a red car."]), S(label="cat", captions=["a cat.", "a dog."])]
    >>> described_by_captions(np.eye(3, dtype=np.float32)[[1, 2]], ["car", "cat"], samples, bank).shape
    (2, 3)
    """
    from captioner.bank import normalize_caption

    W = np.asarray(W, np.float32)
    if W.shape[0] != len(labels) or W.shape[1] != bank.dim:
        raise CaptionerError(f"class vectors {W.shape} do not fit {len(labels)} labels in a {bank.dim}-d bank")
    mu, Ec, _ = bank.centered()
    row = {normalize_caption(t): i for i, t in enumerate(bank.texts)}
    index = {c: k for k, c in enumerate(labels)}
    V = np.zeros_like(W)
    for s in samples:
        k = index.get(s.label)
        rows = [row[c] for c in {normalize_caption(c) for c in s.captions} if c in row] if k is not None else []
        for r in rows:
            V[k] += Ec[r]
    return l2n(l2n(W - mu) + float(weight) * l2n(V)).astype(np.float32)


def predict_proba(Q: np.ndarray, W: np.ndarray, logit_scale: float = DEFAULT_LOGIT_SCALE) -> np.ndarray:
    """(N, D) queries in text space x (C, D) class vectors -> (N, C) probabilities softmax(scale * cos)."""
    from alignment.pseudo import softmax

    L = logit_scale * (l2n(Q) @ l2n(W).T)
    return softmax(L).astype(L.dtype, copy=False)


def topk(P: np.ndarray, k: int) -> np.ndarray:
    """(N, C) scores -> (N, k) class indices, best first (ties: lower index first)."""
    k = min(k, P.shape[1])
    order = np.lexsort((np.broadcast_to(np.arange(P.shape[1]), P.shape), -P), axis=1)
    return order[:, :k]


class _ScaledCosines:
    """Class probabilities softmax(logit_scale x cosines(X)) for a classifier with ``cosines`` and
    ``logit_scale``."""

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """(N, D_img) image embeddings -> (N, C) class probabilities."""
        from alignment.pseudo import softmax

        L = self.logit_scale * self.cosines(X)
        return softmax(L).astype(L.dtype, copy=False)


class ZeroShotClassifier(_ScaledCosines):
    """A label list, its head (C, D_text), and a rotation from image space into text space.

    ``mu`` (D_text,), when given, is subtracted from the rotated queries before the cosine (the mean caption
    embedding, as retrieval does): a rotated image carries no share of the text-side common component, and
    without centring its small remnant favours the classes nearest the mean caption."""

    def __init__(self, labels: list[str], W: np.ndarray, rotation=None, logit_scale: float = DEFAULT_LOGIT_SCALE,
                 mu: np.ndarray | None = None):
        from captioner.retrieval import Identity

        self.labels = check_labels(labels)
        self.W = l2n(W)
        if self.W.shape[0] != len(self.labels):
            raise CaptionerError(f"{len(self.labels)} labels but a head of {self.W.shape[0]} classes")
        self.rotation = rotation or Identity()
        self.logit_scale = logit_scale
        self.mu = None if mu is None else np.asarray(mu, np.float32)

    def cosines(self, X: np.ndarray) -> np.ndarray:
        """(N, D_img) image embeddings -> (N, C) cosines of the rotated (centred) images with the classes."""
        from captioner.retrieval import to_text_space

        Q = to_text_space(self.rotation, X, self.W.shape[1])
        if self.mu is not None:
            Q = Q - self.mu
        return l2n(Q) @ self.W.T


PROTOTYPE_WEIGHT = 0.4  # chosen on Tux Paint train (2-fold) and val for the head map: docs/results/pairfree-real.md
PROTOTYPE_ROUNDS = 3


def class_prototypes(L0: np.ndarray, F: np.ndarray, weight: float = PROTOTYPE_WEIGHT,
                     rounds: int = PROTOTYPE_ROUNDS, logit_scale: float = DEFAULT_LOGIT_SCALE) -> np.ndarray:
    """(C, D) unit class prototypes from a pool with no label: ``L0`` (N, C) the pool's text cosines, ``F``
    (N, D) its centred unit image features. Each round weights the features by softmax(scale x (L0 + weight x
    the prototypes' cosine)) and averages them per class (:class:`PrototypeClassifier`)."""
    from alignment.pseudo import softmax

    L = L0
    for _ in range(int(rounds)):
        C = l2n(softmax(logit_scale * L).T @ F)
        L = L0 + weight * F @ C.T
    return C


class PrototypeClassifier(_ScaledCosines):
    """A :class:`ZeroShotClassifier` plus class prototypes in image space, found with no label: the base
    classifier's probabilities on a pool of unlabelled images weight their centred, unit embeddings into one
    mean per class; the prototypes' cosine, times ``weight``, is added to the text cosine, and the pool is
    re-weighted with the sum (``rounds`` times). The pool's own images give the classes their look in image
    space, which the class prompts only describe. No pair: the pool has no caption and no label.

    >>> rng = np.random.default_rng(0)
    >>> W = np.eye(2, 4, dtype=np.float32)                         # two classes along the first two axes
    >>> X = np.concatenate([W[0] + 0.3 * rng.standard_normal((20, 4)), W[1] + 0.3 * rng.standard_normal((20, 4))])
    >>> clf = PrototypeClassifier(ZeroShotClassifier(["a", "b"], W), X.astype(np.float32))
    >>> bool((clf.predict_proba(X).argmax(1) == np.repeat([0, 1], 20)).mean() > 0.9)
    True
    """

    def __init__(self, base: ZeroShotClassifier, pool: np.ndarray, weight: float = PROTOTYPE_WEIGHT,
                 rounds: int = PROTOTYPE_ROUNDS):
        pool = np.asarray(pool, np.float32)
        if pool.ndim != 2 or len(pool) < 2 or not np.isfinite(pool).all():
            raise CaptionerError(f"prototypes need a finite (N >= 2, D) pool of image embeddings, not {pool.shape}")
        if not weight >= 0 or rounds < 1:
            raise CaptionerError(f"prototype weight must be >= 0 and rounds >= 1, not {weight} and {rounds}")
        self.base, self.labels, self.weight = base, base.labels, float(weight)
        self.logit_scale = base.logit_scale
        self.center = pool.mean(0)
        self.C = class_prototypes(base.cosines(pool), self._feat(pool), self.weight, rounds, self.logit_scale)

    def _feat(self, X) -> np.ndarray:
        return l2n(np.asarray(X, np.float32) - self.center)

    def cosines(self, X: np.ndarray) -> np.ndarray:
        """(N, D_img) -> (N, C): the text cosine plus ``weight`` times the prototype cosine."""
        return self.base.cosines(X) + self.weight * self._feat(X) @ self.C.T


# ---------------------------------------------------------------------------------------------------------
# Pair-free: clusters matched to classes
# ---------------------------------------------------------------------------------------------------------

def cluster_match(X: np.ndarray, W: np.ndarray, seed: int = 0, method: str = "auto", n_init: int = 10) -> dict:
    """Classify images with no image-text pair: k-means the images into C clusters, then match clusters to
    classes by the quadratic assignment between the two C x C cosine-similarity matrices (cluster centroids
    in image space, class vectors in text space).

    Parameters
    ----------
    X : (N, D_img) image embeddings (the set to classify, transductively, as in Blind Match).
    W : (C, D_txt) class vectors.
    method : passed to ``alignment.qap.match_classes``.

    Returns
    -------
    dict with ``perm`` (C,) (cluster i -> class perm[i]), ``clusters`` (N,) cluster of each image,
    ``scores`` (N, C) class scores (minus the distance to the centroid of the cluster matched to each class;
    used for top-5), ``objective``.
    """
    from sklearn.cluster import KMeans

    from alignment.qap import match_classes

    X = l2n(X)
    C = W.shape[0]
    if len(X) < C:
        raise CaptionerError(f"cluster matching needs at least as many images ({len(X)}) as classes ({C})")
    Xc = X - X.mean(0)  # centring: cosines between centroids mean something only around the data mean
    km = KMeans(n_clusters=C, n_init=n_init, random_state=seed).fit(Xc)
    cent = l2n(km.cluster_centers_)
    A = cent @ cent.T  # (C, C) image-side structure
    Wc = l2n(l2n(W) - l2n(W).mean(0))
    B = Wc @ Wc.T  # (C, C) text-side structure
    perm = np.asarray(match_classes(A, B, method=method), dtype=np.int64)
    if sorted(perm.tolist()) != list(range(C)):
        raise CaptionerError("alignment.qap.match_classes did not return a permutation")
    d = ((Xc[:, None, :] - km.cluster_centers_[None]) ** 2).sum(-1)  # (N, C) distance to each cluster
    scores = np.empty_like(d)
    scores[:, perm] = -d  # class perm[i] gets the score of cluster i
    return {"perm": perm, "clusters": km.labels_.astype(np.int64), "scores": scores,
            "objective": float(np.sum(A * B[np.ix_(perm, perm)]))}
