"""A rotation from a seed dictionary refined on unpaired data: Procrustes + CSLS self-learning.

Seeds are pairs (image row, text vector) believed to correspond, each with a weight. They need not be
image-caption pairs: ``head_seeds`` makes them from an image classifier's confident predictions (an image
and the text embedding of its predicted class: ``alignment.pseudo``), so no caption of any image is read.
``refine`` then alternates, as in VecMap's self-learning (Artetxe et al. 2018) with the CSLS criterion of
Conneau et al. (2018):

1. map every image with the current rotation;
2. score image-caption candidates by CSLS (2 cos - r_img - r_txt, r = mean cosine to the k nearest of the
   other side: corrects hubness) and keep the *mutual* best pairs, each kept with probability ``keep``
   (stochastic dictionary induction; ``keep`` rises to 1 over the iterations);
3. refit orthogonal Procrustes on the seeds (weight ``seed_weight`` each) plus the induced pairs (weight 1).

Every step works in each side's own principal axes (the text axes from the caption cloud, which may hold
many more sentences than there are images), so the result is a :class:`~alignment.procrustes.Rotation`.

Example
-------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> X = rng.standard_normal((300, 16)) * np.arange(1, 17) ** -0.5
>>> Q = np.linalg.qr(rng.standard_normal((16, 16)))[0]
>>> Y = X @ Q + 0.05 * rng.standard_normal((300, 16))
>>> rot = refine(X, Y, X[:20], Y[:20] + 0.3 * rng.standard_normal((20, 16)))  # 20 noisy seeds
>>> D = ((rot.transform(X)[:, None] - Y[None]) ** 2).sum(-1)     # every image to every caption
>>> float((D.argmin(1) == np.arange(300)).mean())
1.0
"""
from __future__ import annotations

import numpy as np

from alignment._checks import as_matrix
from alignment.errors import AlignmentError
from alignment.procrustes import Rotation, pca


def _unit(Z):
    return Z / np.maximum(np.linalg.norm(Z, axis=1, keepdims=True), 1e-12)


def _topk_mean(S, k: int, axis: int) -> np.ndarray:
    k = max(1, min(k, S.shape[axis]))
    return -np.partition(-S, k - 1, axis=axis).take(range(k), axis=axis).mean(axis)


def csls_mutual(A, B, k: int = 10):
    """Mutual best CSLS pairs between unit rows A (n1, d) and B (n2, d): (rows of A, rows of B, CSLS score)."""
    S = A @ B.T
    C = 2 * S - _topk_mean(S, k, 1)[:, None] - _topk_mean(S, k, 0)[None, :]
    j = C.argmax(1)
    i = C.argmax(0)
    a = np.flatnonzero(i[j] == np.arange(len(A)))
    return a, j[a], C[a, j[a]]


def _weighted_procrustes(A, B, w):
    U, _, Vt = np.linalg.svd((A * w[:, None]).T @ B)
    return U @ Vt


def check_seeds(seed_rows, n_rows: int, what: str = "image") -> np.ndarray:
    """Seed row indices as int64, or a one-line AlignmentError naming the first row that does not exist."""
    r = np.asarray(seed_rows)
    if r.ndim != 1 or not np.issubdtype(r.dtype, np.integer):
        raise AlignmentError(f"seed {what} rows must be a list of integers, got {r.dtype} of shape {r.shape}")
    bad = r[(r < 0) | (r >= n_rows)]
    if len(bad):
        raise AlignmentError(f"seed names {what} row {int(bad[0])}, but the {what} cloud has rows 0..{n_rows - 1}")
    return r.astype(np.int64)


def refine(X, Y, seed_x, seed_y, seed_weight=1.0, iters: int = 10, k: int = 10, keep: float = 0.5,
           dim: int | None = None, seed: int = 0, seed_center: str = "cloud", **meta) -> Rotation:
    """Rotation X -> Y from seeds, refined by mutual-CSLS self-learning on the unpaired clouds.

    Parameters
    ----------
    X : (N1, D1) image cloud; Y : (N2, D2) text cloud (rows need not correspond; N2 may be >> N1)
    seed_x : (S, D1) seed image vectors; seed_y : (S, D2) their text-side partners (any text vectors, e.g.
        class-name embeddings, centred on their own mean)
    seed_weight : scalar or (S,) weights of the seeds in every Procrustes step
    seed_center : "cloud" (seed_y are text-cloud vectors: centre them on Y's mean) or "own" (they live
        elsewhere in text space, e.g. class-name prompts: centre them on their own mean)
    iters : self-learning rounds (0: Procrustes on the seeds alone)
    keep : the first round keeps each induced pair with this probability, rising linearly to 1
    """
    X = as_matrix(X, "X", min_rows=3)
    Y = as_matrix(Y, "Y", min_rows=3)
    sx = as_matrix(seed_x, "seed_x", min_rows=1, allow_constant=True)
    sy = as_matrix(seed_y, "seed_y", min_rows=1, allow_constant=True)
    if sx.shape[1] != X.shape[1] or sy.shape[1] != Y.shape[1] or len(sx) != len(sy):
        raise AlignmentError(f"seeds {sx.shape} -> {sy.shape} do not fit clouds of width {X.shape[1]} -> "
                             f"{Y.shape[1]} (one text vector per seed image)")
    w = np.broadcast_to(np.asarray(seed_weight, np.float64), (len(sx),)).copy()
    d = min(X.shape[1], Y.shape[1], len(X) - 1, len(Y) - 1) if dim is None else int(dim)
    mx, my = X.mean(0, dtype=np.float64), Y.mean(0, dtype=np.float64)
    Vx, _ = pca((X - mx).astype(np.float64), d)
    Vy, _ = pca((Y - my).astype(np.float64), d)
    A = _unit((X - mx) @ Vx)
    B = _unit((Y - my) @ Vy)
    SA = _unit((sx - mx) @ Vx)
    if seed_center not in ("cloud", "own"):
        raise AlignmentError(f"seed_center must be 'cloud' or 'own', not {seed_center!r}")
    SB = _unit((sy - (sy.mean(0) if seed_center == "own" and len(sy) > 1 else my)) @ Vy)
    R = _weighted_procrustes(SA, SB, w)
    rng = np.random.default_rng(seed)
    history, last = [], (np.zeros(0, np.int64), np.zeros(0, np.int64))
    for it in range(iters):
        a, b, c = csls_mutual(A @ R, B, k)
        p = keep + (1 - keep) * it / max(iters - 1, 1)
        m = rng.random(len(a)) < p
        a, b = a[m], b[m]
        R = _weighted_procrustes(np.concatenate([SA, A[a]]), np.concatenate([SB, B[b]]),
                                 np.concatenate([w, np.ones(len(a))]))
        history.append(int(len(a)))
        last = (a, b)
    scale = float(np.sqrt(((Y - my) ** 2).sum(1).mean() / max(((X - mx) ** 2).sum(1).mean(), 1e-300)))
    info = {"seeds": int(len(sx)), "seed_weight": float(w.mean()), "iters": iters, "k": k, "keep": keep,
            "induced_per_iter": history, "dim": int(d)}
    rot = Rotation("seeded", mx.astype(np.float32), my.astype(np.float32), R.astype(np.float32),
                   Vx.astype(np.float32), Vy.astype(np.float32), scale, {**meta, "fit": {"seeded": info}})
    rot.induced = last  # (image rows, text rows) of the last round's dictionary, for diagnostics
    return rot


def head_seeds(X, logits, class_embeddings, top: float = 0.5, temperature: float = 4.0, min_seeds: int = 10):
    """Seeds from a classifier head: the images whose top class probability (at ``temperature``) is among the
    ``top`` fraction of most confident, each with its soft class target (``alignment.pseudo``).

    Returns (seed image rows (S,), seed text vectors (S, D_y), weights (S,) = the top probability)."""
    from alignment.pseudo import pseudo_targets, softmax

    L = as_matrix(logits, "logits", min_rows=1, allow_constant=True)
    if len(L) != len(X):
        raise AlignmentError(f"{len(X)} images but {len(L)} rows of logits")
    P = softmax(L, temperature).max(1)
    n = max(min(min_seeds, len(X)), int(round(top * len(X))))
    rows = np.argsort(-P, kind="stable")[:n]
    T = pseudo_targets(L[rows], class_embeddings, temperature)
    return rows, T, P[rows]


__all__ = ["csls_mutual", "refine", "head_seeds", "check_seeds"]
