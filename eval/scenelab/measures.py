"""The scene lab's measures: held-out rotation residual, whitening, the view subspace, mutual k-NN and its
ceiling. Pure numpy (and ``alignment``); no training."""
from __future__ import annotations

import numpy as np

from alignment.lattice_cards import view_basis, whitening  # noqa: F401  (whitening: the lab's, in the library)


def holdout_split(n: int, fit_frac: float = 0.5, seed: int = 0):
    """(fit indices, held-out indices): a seeded random ``fit_frac`` of ``range(n)`` and the rest. Every
    held-out score of the lab (``procrustes_residual``, eval.scenelab_diagnose) splits this way."""
    perm = np.random.default_rng(seed).permutation(n)
    return perm[: int(n * fit_frac)], perm[int(n * fit_frac):]


def procrustes_residual(X: np.ndarray, Y: np.ndarray, fit_frac: float = 0.5, seed: int = 0) -> float:
    """Held-out relative residual of the best rotation + scale from X to Y (alignment.procrustes).

    The rotation (with each side's top principal axes when the widths differ) and the scale are fitted
    on a random ``fit_frac`` of the pairs; returns ``||T(X_ev) - Y_ev||^2 / ||Y_ev - mean(Y_fit)||^2`` on
    the rest: 0 = the same space up to a rotation, about 1 = unrelated (1 - held-out R^2).
    """
    from alignment.procrustes import fit_procrustes

    X = np.asarray(X, np.float64)
    Y = np.asarray(Y, np.float64)
    # equal footing: each side at unit RMS row norm, so that the fitted scale is comparable across runs
    X = (X - X.mean(0)) / np.sqrt(((X - X.mean(0)) ** 2).sum(1).mean())
    Y = (Y - Y.mean(0)) / np.sqrt(((Y - Y.mean(0)) ** 2).sum(1).mean())
    fi, ev = holdout_split(len(X), fit_frac, seed)
    rot = fit_procrustes(X[fi], Y[fi], center=True, scale=True)
    pred = rot.transform(X[ev])
    return float(((pred - Y[ev]) ** 2).sum() / ((Y[ev] - Y[fi].mean(0)) ** 2).sum())


def view_subspace(A: np.ndarray, B: np.ndarray, k: int | None = None, eps: float = 1e-6):
    """The ``k`` directions of an embedding along which one view of a scene best predicts the other.

    ``A``, ``B``: (n, D) embeddings of two observations of the same n scenes, in *one* modality (the
    JEPA's own views; no cross-modal pair is used). Both are centred on their joint mean and whitened by
    their joint covariance; the symmetrised cross-covariance between the views is then diagonalised.
    Its eigenvalues estimate the view kernel's eigenvalues on the embedding's span (in this world
    (1 - CORRUPT)^2 = 0.72 for the 12 single-attribute directions, its square for products of two
    attributes), so the top ``k`` eigenvectors are the leading eigenfunctions the theorem is about,
    whatever else a wider embedding holds. With D = k this only whitens (a rotation does not matter).

    Returns ``(mean (D,), P (D, k), eigenvalues (D,) in descending order)``: project with
    ``(X - mean) @ P`` (unit variance, uncorrelated columns).
    """
    A = np.asarray(A, np.float64)
    B = np.asarray(B, np.float64)
    if A.shape != B.shape or A.ndim != 2 or len(A) < 2:
        raise ValueError(f"view_subspace: A and B must be (n, D) of one shape with n >= 2, got {A.shape}, {B.shape}")
    k = A.shape[1] if k is None else k
    if not 1 <= k <= A.shape[1]:
        raise ValueError(f"view_subspace: k must be in 1..{A.shape[1]}, not {k}")
    mu, P, lam = view_basis(A, B, eps)           # the product's (alignment.lattice_cards), cut to k directions
    return mu, P[:, :k], lam


def mutual_knn(X, Y, k: int = 10) -> float:
    """Mutual k-NN alignment through the project's metric registry (alignment.metrics)."""
    from alignment.metrics import score

    return float(score("mutual_knn", np.asarray(X, np.float32), np.asarray(Y, np.float32), k=k))


def mutual_knn_ceiling(Z: np.ndarray, k: int = 10, noise: float = 0.01, seed: int = 0) -> float:
    """Mutual k-NN between the latents ``Z`` and a random rotation of them plus ``noise`` (per dim): what
    a perfect representation scores. Below 1 because the scenes are discrete: each has 12 neighbours one
    attribute away, all at the same distance, and the noise breaks those ties at random."""
    Z = np.asarray(Z, np.float64)
    rng = np.random.default_rng(seed)
    q = np.linalg.qr(rng.standard_normal((Z.shape[1], Z.shape[1])))[0]
    return mutual_knn(Z, Z @ q + noise * rng.standard_normal(Z.shape), k)
