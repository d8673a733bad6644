"""Fitting linear maps from image-embedding space to text-embedding space (the map objects and their files
are in :mod:`alignment.maps`, re-exported here).

Orthogonal Procrustes from pairs (``fit_procrustes``, with PCA per side or a learned semi-orthogonal map
when the widths differ), least squares (``fit_ridge``) and a Haar-random rotation between the PCA bases
(``fit_random``, the floor). Each returns a map of the form :mod:`alignment.maps` describes.

Example
-------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> X = rng.standard_normal((200, 8)); Q = np.linalg.qr(rng.standard_normal((8, 8)))[0]
>>> rot = fit_procrustes(X, X @ Q)
>>> bool(np.abs(rot.R - Q).max() < 1e-8)
True
"""
from __future__ import annotations

import numpy as np

from alignment._checks import as_matrix, blas_threads, check_pair, float_dtype
from alignment.errors import AlignmentError
from alignment.maps import RidgeMap, Rotation


# ----------------------------------------------------------------------------------------------- core math
def orthogonal_procrustes(A, B, check: bool = True):
    """Orthogonal R minimising ||A R - B||_F (no centering), like ``scipy.linalg.orthogonal_procrustes``.

    Parameters
    ----------
    A : (N, Dx) array
    B : (N, Dy) array. With Dx != Dy the answer is semi-orthogonal (orthonormal columns or rows).

    Returns
    -------
    R : (Dx, Dy) array
    sv_sum : float, sum of the singular values of A^T B (the optimal scale is sv_sum / ||A||_F^2).
    """
    if check:
        A, B = check_pair(A, B, ("A", "B"), allow_constant=True)
    M = A.T @ B  # (Dx, Dy): the only pass over the N rows
    U, s, Vt = svd(M)
    return U @ Vt, float(s.sum())


def pca(Xc: np.ndarray, d: int):
    """Top-``d`` principal axes of already-centred rows.

    Parameters
    ----------
    Xc : (N, D) centred array
    d : number of axes, <= min(N, D)

    Returns
    -------
    V : (D, d) orthonormal columns, sorted by decreasing variance, each signed so that the projections have
        positive skewness (an intrinsic convention: two rotated copies of one cloud get the same signs when
        the data are skewed, which the pair-free matcher exploits).
    var : (d,) variances along the axes.
    """
    n, D = Xc.shape
    if n < D:  # thin SVD is cheaper than the D x D covariance when rows are few
        with blas_threads(1):
            _, s, Vt = np.linalg.svd(Xc, full_matrices=False)
        V, var = Vt[:d].T, (s[:d] ** 2) / max(n - 1, 1)
    else:
        C = (Xc.T @ Xc).astype(np.float64) / max(n - 1, 1)
        with blas_threads(1):
            w, V = np.linalg.eigh(C)
        order = np.argsort(w)[::-1][:d]
        V, var = V[:, order], w[order]
    V = np.ascontiguousarray(V, dtype=Xc.dtype)
    P = Xc @ V
    skew = (P * P * P).mean(0)  # P ** 3 calls pow() per element: 100x slower
    V = V * np.where(skew < 0, -1.0, 1.0).astype(V.dtype)
    return V, np.maximum(np.asarray(var, dtype=np.float64), 0.0)


def random_orthogonal(d: int, seed: int = 0, dtype=np.float64) -> np.ndarray:
    """A Haar-distributed random orthogonal matrix (QR of a Gaussian with the sign fix).

    Parameters
    ----------
    d : the size
    seed : the generator's seed (same seed, same matrix)
    dtype : the result's dtype

    Returns
    -------
    np.ndarray, shape (d, d), with ``R.T @ R == I`` to rounding
    """
    rng = np.random.default_rng(seed)
    with blas_threads(1):
        Qm, Rm = np.linalg.qr(rng.standard_normal((d, d)))
    return (Qm * np.sign(np.diag(Rm))).astype(dtype)


# ----------------------------------------------------------------------------------------------- fitting
def _shared_dim(dim, Dx, Dy, n):
    d = min(Dx, Dy) if dim is None else int(dim)
    if d < 1:
        raise AlignmentError(f"dim must be >= 1, got {dim}")
    if d > min(Dx, Dy):
        raise AlignmentError(f"dim={d} exceeds the smaller embedding dimension min({Dx}, {Dy})")
    # A centred sample of n rows spans at most n-1 directions; axes beyond are arbitrary null directions.
    return min(d, max(n - 1, 1))


def fit_procrustes(X, Y, center: bool = True, scale: bool = False, dim: int | None = None,
                   shared: str = "pca", **meta) -> Rotation:
    """Orthogonal Procrustes from paired rows: the rotation R minimising ||(X - mx) R s - (Y - my)||_F.

    Parameters
    ----------
    X : (N, D_x) image embeddings; Y : (N, D_y) text embeddings, row i of X paired with row i of Y
    center : subtract each side's mean first (stored in the map)
    scale : also fit a global scale s = tr(Sigma) / ||X_c||_F^2 (else s = 1)
    dim : size of the shared space when D_x != D_y (or to truncate when equal); default min(D_x, D_y)
    shared : how to reach the shared space when D_x != D_y or ``dim`` is given:
        "pca": project each side on its own top-``dim`` principal axes, then rotate (d x d);
        "learned": one semi-orthogonal (D_x, D_y) map from the SVD of X_c^T Y_c (uses the pairs; ignores
        ``dim``).
    **meta : stored in the artifact (x_encoder, y_encoder, datasets, pairing, ...)

    Returns
    -------
    Rotation with R (d, d) (or (D_x, D_y) for "learned"); ``meta["fit"]`` has the pair count and, when
    cheap (N * (D_x + D_y) <= 2e7), the residual and R^2 on the pairs.
    """
    X, Y = check_pair(X, Y, min_rows=2)
    dt = float_dtype(X, Y)
    X, Y = X.astype(dt, copy=False), Y.astype(dt, copy=False)
    n, Dx = X.shape
    Dy = Y.shape[1]
    if shared not in ("pca", "learned"):
        raise AlignmentError(f"shared must be 'pca' or 'learned', not {shared!r}")
    mx = X.mean(0, dtype=np.float64) if center else np.zeros(Dx)
    my = Y.mean(0, dtype=np.float64) if center else np.zeros(Dy)
    px = py = None
    use_pca = (Dx != Dy or dim is not None) and shared == "pca"
    if use_pca:
        d = _shared_dim(dim, Dx, Dy, n)
        Xc, Yc = X - mx.astype(dt), Y - my.astype(dt)
        px, _ = pca(Xc, d)
        py, _ = pca(Yc, d)
        A, B = Xc @ px, Yc @ py  # (N, d) each
        M = (A.T @ B).astype(np.float64)
        sums = lambda: (_sq(A), _sq(B), _sq(Yc))  # noqa: E731
    else:
        # Centre through a rank-1 correction of X^T Y instead of centred copies: one pass over the rows,
        # which keeps the fit as fast as scipy's uncentred orthogonal_procrustes.
        M = (X.T @ Y).astype(np.float64) - n * np.outer(mx, my)
        if center and n * np.linalg.norm(mx) * np.linalg.norm(my) > 1e3 * max(np.linalg.norm(M), 1e-300):
            M = ((X - mx.astype(dt)).T @ (Y - my.astype(dt))).astype(np.float64)  # cancellation: be exact
        nxm, nym = n * float(mx @ mx), n * float(my @ my)
        sums = lambda: (_sq(X) - nxm, _sq(Y) - nym, _sq(Y) - nym)  # noqa: E731
    U, sv, Vt = svd(M.astype(dt) if M.shape[0] > 256 else M)
    R = (U @ Vt).astype(dt)
    sv_sum = float(sv.sum())
    info = {"n_pairs": int(n), "center": center, "fit_scale": bool(scale),
            "shared": ("pca" if use_pca else "learned") if (Dx != Dy or dim is not None) else "none",
            "dim_requested": dim}
    s = 1.0
    if scale or n * (Dx + Dy) <= 2e7:
        nx, nb, ny = sums()
        if scale and nx > 0:
            s = sv_sum / nx
        if R.shape[0] == R.shape[1]:
            # ||A R s - B||^2 = s^2 ||A||^2 - 2 s sv_sum + ||B||^2 for orthogonal R (no extra pass)
            resid = max(s * s * nx - 2 * s * sv_sum + nb, 0.0) + (ny - nb)
        else:
            Ac = X - mx.astype(dt)
            resid = _sq((Ac @ R) * s - (Y - my.astype(dt)))
        info.update(residual=float(resid), r2=float(1.0 - resid / ny) if ny > 0 else float("nan"))
    meta = {**meta, "fit": {**meta.get("fit", {}), **info}}
    return Rotation("procrustes", mx.astype(dt), my.astype(dt), R, px, py, float(s), meta)


def _sq(A) -> float:
    return float(np.einsum("ij,ij->", A, A, dtype=np.float64))


def svd(M):
    """Thin SVD through scipy's gesdd (about twice as fast as numpy's wrapper here; gesvd when it fails).

    Parameters
    ----------
    M : (m, n) array

    Returns
    -------
    U : (m, k), s : (k,), Vt : (k, n) with k = min(m, n) and ``M = U @ diag(s) @ Vt``
    """
    from scipy.linalg import LinAlgError
    from scipy.linalg import svd as scipy_svd

    with blas_threads(1):
        try:
            return scipy_svd(M, full_matrices=False, check_finite=False, lapack_driver="gesdd")
        except LinAlgError:  # gesdd can fail to converge on nasty inputs; gesvd is slower and sturdier
            return scipy_svd(M, full_matrices=False, check_finite=False, lapack_driver="gesvd")


def fit_ridge(X, Y, alpha: float | None = None, center: bool = True, **meta) -> RidgeMap:
    """Ridge regression map W = argmin ||X_c W - Y_c||^2 + alpha ||W||^2 (D_x, D_y): the non-orthogonal
    upper bound for one linear map.

    Parameters
    ----------
    X : (N, D_x), Y : (N, D_y) paired rows
    alpha : ridge strength; None picks it by exact leave-one-out error over a grid (via one SVD of X_c)

    Returns
    -------
    RidgeMap; ``meta["fit"]`` has alpha and the leave-one-out error when it was searched.
    """
    X, Y = check_pair(X, Y, min_rows=3)
    dt = float_dtype(X, Y)
    X, Y = X.astype(np.float64), Y.astype(np.float64)
    mx = X.mean(0) if center else np.zeros(X.shape[1])
    my = Y.mean(0) if center else np.zeros(Y.shape[1])
    Xc, Yc = X - mx, Y - my
    U, s, Vt = np.linalg.svd(Xc, full_matrices=False)  # Xc = U diag(s) Vt
    keep = s > s[0] * 1e-10
    U, s, Vt = U[:, keep], s[keep], Vt[keep]
    UtY = U.T @ Yc  # (r, D_y)
    info = {"n_pairs": int(X.shape[0]), "center": center}
    if alpha is None:
        grid = (s[0] ** 2) * np.logspace(-6, 1, 22)
        best = None
        for a in grid:
            f = s ** 2 / (s ** 2 + a)  # shrinkage per singular direction
            fitted = U @ (f[:, None] * UtY)
            h = (U ** 2) @ f  # diagonal of the hat matrix
            loo = (((Yc - fitted) / (1.0 - h)[:, None]) ** 2).sum() / X.shape[0]
            if best is None or loo < best[1]:
                best = (a, loo)
        alpha = float(best[0])
        info["loo_mse"] = float(best[1])
        info["alpha_grid"] = [float(grid[0]), float(grid[-1])]
    W = Vt.T @ ((s / (s ** 2 + alpha))[:, None] * UtY)  # (D_x, D_y)
    info["alpha"] = float(alpha)
    meta = {**meta, "fit": {**meta.get("fit", {}), **info}}
    return RidgeMap("ridge", mx.astype(dt), my.astype(dt), W.astype(dt), None, None, 1.0, meta)


def fit_random(X, Y, dim: int | None = None, seed: int = 0, center: bool = True, **meta) -> Rotation:
    """The floor: centring and per-side PCA as in the fitted maps, but a Haar-random rotation between them.

    Parameters
    ----------
    X : (N_x, D_x), Y : (N_y, D_y); no pairing is used (only each side's mean and principal axes)
    dim : the shared dimension (default min(D_x, D_y) when they differ, else no projection)
    seed : the rotation's seed
    center : subtract each side's mean first
    **meta : stored in the map's metadata

    Returns
    -------
    Rotation, method "random": ``transform`` maps (N, D_x) -> (N, D_y)
    """
    X = as_matrix(X, "X", min_rows=2)
    Y = as_matrix(Y, "Y", min_rows=2)
    dt = float_dtype(X, Y)
    Dx, Dy = X.shape[1], Y.shape[1]
    mx = X.mean(0, dtype=np.float64).astype(dt) if center else np.zeros(Dx, dt)
    my = Y.mean(0, dtype=np.float64).astype(dt) if center else np.zeros(Dy, dt)
    px = py = None
    if Dx != Dy or dim is not None:
        d = _shared_dim(dim, Dx, Dy, min(X.shape[0], Y.shape[0]))
        px, _ = pca((X - mx).astype(dt), d)
        py, _ = pca((Y - my).astype(dt), d)
    else:
        d = Dx
    R = random_orthogonal(d, seed, dt)
    meta = {**meta, "fit": {**meta.get("fit", {}), "seed": int(seed), "center": center}}
    return Rotation("random", mx, my, R, px, py, 1.0, meta)


