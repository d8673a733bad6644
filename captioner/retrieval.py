"""Retrieval captioning: rotate an image embedding into text space, return the nearest bank captions; and
the DeCap-style projection of a query onto the bank (the input the decoder gets).

Any object with ``transform(X) -> (N, D_text)`` serves as the rotation: a paired Procrustes fit, a pair-free
match, a ridge map, a random rotation, or ``Identity`` (text queries: the text-only ceiling).
"""
from __future__ import annotations

import numpy as np

from captioner.bank import CaptionBank, l2n
from captioner.errors import CaptionerError


class Identity:
    """The identity map (queries already in text space)."""

    def transform(self, X):
        return np.asarray(X, np.float32)


def to_text_space(rotation, X: np.ndarray, dim: int) -> np.ndarray:
    """Apply ``rotation`` to image embeddings: (N, D_img) -> (N, dim) float32 text-space points (not
    normalised: retrieval centres them on the bank first)."""
    X = np.asarray(X, np.float32)
    if X.ndim == 1:
        X = X[None]
    try:
        Q = np.asarray(rotation.transform(X), np.float32)
    except ValueError as e:  # alignment's errors are ValueErrors: a map fitted for other encoders
        raise CaptionerError(str(e)) from None
    if Q.ndim != 2 or Q.shape != (len(X), dim):
        raise CaptionerError(f"rotation maps {X.shape} to {Q.shape}, but the caption bank is {dim}-d; "
                             "was it fitted for another text encoder?")
    return Q


def centre_queries(Q: np.ndarray, bank: CaptionBank) -> np.ndarray:
    """Text-space points -> unit directions around the bank mean (what retrieval compares). (N, D)."""
    mu, _, _ = bank.centered()
    return l2n(np.asarray(Q, np.float32) - mu)


def onto_manifold(Q: np.ndarray, bank: CaptionBank) -> np.ndarray:
    """A text-space point with a caption's typical geometry: the bank mean plus the query's centred
    direction at the bank's RMS radius, unit-normalised. The decoder input when it reads a rotated query
    directly (no projection). (N, D) -> (N, D)."""
    mu, _, r = bank.centered()
    return l2n(mu + r * centre_queries(Q, bank))


def retrieve(Q: np.ndarray, bank: CaptionBank, top_k: int = 5, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Top-k bank captions by cosine similarity.

    Parameters
    ----------
    Q : (N, D) queries in text space; compared to the bank as directions around the bank mean
        (``CaptionBank.centered``).
    top_k : clipped to the bank size.
    chunk : queries per block, so a COCO-sized bank (400k captions) never needs an (N, M) matrix at once.

    Returns
    -------
    idx : (N, k) int64 bank rows, best first (ties: lower row first); scores : (N, k) float32 centred cosines.
    """
    Q = np.asarray(Q, np.float32)
    if Q.ndim != 2 or Q.shape[1] != bank.dim:
        raise CaptionerError(f"queries are {Q.shape[-1]}-d but the caption bank is {bank.dim}-d")
    Q = centre_queries(Q, bank)
    _, Ec, _ = bank.centered()
    M = len(bank)
    k = max(1, min(int(top_k), M))
    idx = np.zeros((len(Q), k), np.int64)
    sc = np.zeros((len(Q), k), np.float32)
    for a in range(0, len(Q), chunk):
        S = Q[a:a + chunk] @ Ec.T  # (n, M) centred cosines
        cand = np.argpartition(-S, k - 1, axis=1)[:, :k] if k < M else np.tile(np.arange(M), (len(S), 1))
        cs = np.take_along_axis(S, cand, 1)
        order = np.lexsort((cand, -cs), axis=1)  # by score, then by row
        idx[a:a + chunk] = np.take_along_axis(cand, order, 1)
        sc[a:a + chunk] = np.take_along_axis(cs, order, 1)
    return idx, sc


def distinct(idx: np.ndarray, scores: np.ndarray, key, top_k: int) -> tuple[list[list[int]], list[list[float]]]:
    """The first ``top_k`` of each row of ranked captions ``idx`` (with ``scores``) whose ``key(row)`` differs
    from that of every caption kept before it; rows with too few distinct keys are filled with the skipped
    captions, in rank order. Returns (rows, scores): ``min(top_k, idx.shape[1])`` per query, best first.

    >>> distinct(np.array([[4, 7, 9]]), np.array([[0.9, 0.8, 0.1]]), {4: "moped", 7: "moped", 9: "cat"}.get, 2)
    ([[4, 9]], [[0.9, 0.1]])
    """
    k = min(int(top_k), idx.shape[1])
    rows, vals = [], []
    for r, sc in zip(idx, scores):
        keep, seen = [], set()
        for j in range(len(r)):
            if len(keep) == k:
                break
            kj = key(int(r[j]))
            if kj not in seen:
                keep.append(j)
                seen.add(kj)
        keep = sorted(keep + [j for j in range(len(r)) if j not in keep][:k - len(keep)])
        rows.append([int(r[j]) for j in keep])
        vals.append([float(sc[j]) for j in keep])
    return rows, vals


def project(Q: np.ndarray, bank: CaptionBank, temperature: float = 0.01, top_k: int | None = None,
            chunk: int = 256) -> np.ndarray:
    """DeCap's projection: the softmax(cos / temperature)-weighted mean of the bank embeddings (the raw
    ones: the result is a caption-like point), renormalised; cosines are centred as in ``retrieve``.

    It replaces a query that lies off the text manifold (an image rotated into text space) by a point in
    the hull of real caption embeddings, which a decoder trained on text only can read.

    Parameters
    ----------
    Q : (N, D) queries; temperature : softmax temperature on cosines (DeCap uses 1/100);
    top_k : average over the top-k captions only (None: all).

    Returns
    -------
    (N, D) float32 unit rows.
    """
    if temperature <= 0:
        raise CaptionerError(f"projection temperature must be > 0, not {temperature}")
    Q = centre_queries(Q, bank)
    _, Ec, _ = bank.centered()
    out = np.zeros_like(Q)
    for a in range(0, len(Q), chunk):
        S = (Q[a:a + chunk] @ Ec.T) / temperature  # (n, M) centred cosines
        if top_k is not None and top_k < S.shape[1]:
            thr = -np.partition(-S, top_k - 1, axis=1)[:, top_k - 1:top_k]
            S = np.where(S >= thr, S, -np.inf)
        W = np.exp(S - S.max(1, keepdims=True))
        W /= W.sum(1, keepdims=True)
        out[a:a + chunk] = W @ bank.E
    return l2n(out)


class RetrievalCaptioner:
    """Image embeddings -> top-k bank captions, through one rotation into the bank's text space."""

    def __init__(self, bank: CaptionBank, rotation=None):
        self.bank = bank
        self.rotation = rotation or Identity()

    def queries(self, X: np.ndarray) -> np.ndarray:
        """(N, D_img) -> (N, D_text) text-space points."""
        return to_text_space(self.rotation, X, self.bank.dim)

    def caption(self, X: np.ndarray, top_k: int = 5) -> list[list[dict]]:
        """For each row of X, ``[{"caption", "score"}, ...]`` best first."""
        idx, sc = retrieve(self.queries(X), self.bank, top_k)
        return [[{"caption": self.bank.texts[j], "score": float(s)} for j, s in zip(r, q)] for r, q in zip(idx, sc)]


class AffineMap:
    """A fitted linear map as one float32 affine map ``(X - mean_x) @ W + mean_y`` (``Pipeline.serving_rotation``)."""

    def __init__(self, m, W, mean_x, mean_y):
        self.map, self.W, self.mean_x, self.mean_y = m, W, mean_x, mean_y
        self.meta = getattr(m, "meta", {})

    @classmethod
    def of(cls, m):
        from alignment.maps import LinearMap

        if not isinstance(m, LinearMap) or type(m).transform is not LinearMap.transform:
            return m  # a map with its own transform: used as it is
        W = np.asarray(m.matrix(), np.float64)
        return cls(m, np.ascontiguousarray(W, np.float32), np.asarray(m.mean_x, np.float32),
                   np.asarray(m.mean_y, np.float32))

    def transform(self, X):
        A = X if isinstance(X, np.ndarray) else None
        if A is None or A.ndim != 2 or A.shape[1] != self.W.shape[0] or not np.isfinite(A).all():
            return self.map.transform(X)  # the map's own checks and messages (and torch tensors)
        A = A.astype(np.float32, copy=False)
        return (A - self.mean_x) @ self.W + self.mean_y

    __call__ = transform

    def __getattr__(self, name):  # dim_x, dim_y, method ... of the map itself
        if name == "map":
            raise AttributeError(name)
        return getattr(self.map, name)
