"""What the pair-free matchers share: the result type, the centring / scaling / PCA of both clouds, the
rotation between the two PCA bases as a map of the raw spaces, and weighted Procrustes on paired rows."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from alignment._checks import as_matrix, blas_threads, in_parallel, work_threads
from alignment.errors import AlignmentError
from alignment.procrustes import Rotation, pca, svd


@dataclass
class MatchResult:
    """What a pair-free matcher returns.

    Attributes
    ----------
    rotation : Rotation mapping X's space (D1) into Y's (D2); ``rotation.transform(X[i]) ~ Y[perm[i]]``
    perm : (N1,) int64, the row of Y matched to row i of X, or -1 when unmatched (N1 > N2, rejected)
    coupling : (N1, N2) soft correspondence: scipy.sparse CSR over each Y row's candidates (ours) or the
        dense transport plan (GW); rows need not sum to one
    score : unsupervised quality, the fraction of mutual nearest neighbours under the rotation (0..1)
    info : timings, stage scores, parameters
    """

    rotation: Rotation
    perm: np.ndarray
    coupling: object = None
    score: float = float("nan")
    info: dict = field(default_factory=dict)

    def accuracy(self, true_perm) -> float:
        """Fraction of X rows matched to their true Y row (``true_perm[i]``; -1 entries are ignored)."""
        t = np.asarray(true_perm)
        ok = t >= 0
        return float((self.perm[ok] == t[ok]).mean()) if ok.any() else float("nan")


@dataclass
class Prep:
    """Both clouds centred, scaled to unit total variance and put in their own principal axes.

    Attributes
    ----------
    A : (N1, d) X in its principal axes; B : (N2, d) Y in its
    var_a, var_b : (d,) the variance along each axis
    mx : (D1,), my : (D2,) the means removed
    Vx : (D1, d), Vy : (D2, d) the principal axes
    sx, sy : the total standard deviation removed from each side
    """
    A: np.ndarray  # (N1, d) X in its own principal axes, unit total variance
    B: np.ndarray  # (N2, d)
    var_a: np.ndarray  # (d,)
    var_b: np.ndarray
    mx: np.ndarray
    my: np.ndarray
    Vx: np.ndarray  # (D1, d)
    Vy: np.ndarray  # (D2, d)
    sx: float  # total standard deviation removed from X
    sy: float


# rows per block when preparing large clouds (centring, covariance, projection): memory O(chunk x D)
PREP_CHUNK = 8192


def prepare(X, Y, dim, normalize=True, rows_l2=False, chunk: int | None = None, threads: int | None = None) -> Prep:
    """Centre, scale and PCA both clouds (blockwise above ``chunk`` rows) for a matcher.

    Parameters
    ----------
    X : (N1, D1), Y : (N2, D2), at least 3 rows each
    dim : principal axes kept per side, d (None: min(D1, D2))
    normalize : scale each side to unit total variance
    rows_l2 : L2-normalise the rows first (cosine geometry)
    chunk : rows per block (default ``PREP_CHUNK``); threads : worker threads

    Returns
    -------
    Prep (``A`` (N1, d), ``B`` (N2, d), the means, axes and scales to map back)
    """
    X = as_matrix(X, "X", min_rows=3)
    Y = as_matrix(Y, "Y", min_rows=3)
    n1, D1 = X.shape
    n2, D2 = Y.shape
    d = min(D1, D2) if dim is None else int(dim)
    if d < 1 or d > min(D1, D2):
        raise AlignmentError(f"dim={dim} must be between 1 and min(D1, D2) = {min(D1, D2)}")
    d = min(d, n1 - 1, n2 - 1)
    threads = threads or work_threads()
    # two free cores or more: each side on its own thread (half the BLAS threads each), which also overlaps
    # the two eigh calls that gain nothing from threads (2 cores, 1M x 384: 14.2 -> 10.4 s; N=5000: 0.09 ->
    # 0.07 s; the same bits)
    split = threads >= 2
    with blas_threads(max(1, threads // 2) if split else threads):
        (A, va, mx, Vx, sx), (B, vb, my, Vy, sy) = in_parallel(
            [lambda Z=Z: _pca_side(Z, d, normalize, rows_l2, chunk or PREP_CHUNK) for Z in (X, Y)],
            2 if split else 1)
    return Prep(A, B, va, vb, mx, my, Vx, Vy, sx, sy)


def _pca_side(X, d, normalize, rows_l2, chunk):
    """Long: three passes over the rows (mean, covariance, projection) and the small-N branch.

    One cloud centred, (row-normalised,) scaled to unit total variance and projected on its top d
    principal axes, in blocks of ``chunk`` rows: the mean, then the covariance (float32 blocks summed in
    float64), then the projection. Returns (P (N, d) float32, var (d,), mean (D,) float64, V (D, d), scale).
    Axis signs follow :func:`alignment.procrustes.pca` (positive skewness of the projections). One block
    buffer is reused: fresh blocks of tens of MB would be new pages (page faults) every time."""
    n, D = X.shape
    mean = np.zeros(D)
    for s in range(0, n, chunk):
        mean += X[s:s + chunk].sum(0, dtype=np.float64)
    mean /= n
    m = mean.astype(np.float32) if X.dtype == np.float32 else mean
    buf = np.empty((min(chunk, n), D), np.float32)

    def block(s):  # centred float32 rows (unit length for rows_l2) and their norms before that
        Z = buf[:min(chunk, n - s)]
        if X.dtype == np.float32:
            np.subtract(X[s:s + chunk], m, out=Z)
        else:
            Z[:] = X[s:s + chunk] - m
        r = np.linalg.norm(Z, axis=1, keepdims=True) if rows_l2 else None
        if rows_l2:
            Z /= np.maximum(r, 1e-12)
        return Z, r

    C = np.zeros((D, D))
    rsum = 0.0
    for s in range(0, n, chunk):
        Z, r = block(s)
        C += Z.T @ Z
        rsum += float(r.sum()) if rows_l2 else 0.0
    scale = float(np.sqrt(np.trace(C) / n)) if normalize else 1.0
    if scale == 0:
        raise AlignmentError("X or Y has zero variance; nothing to match")
    if n < D:  # few rows: the thin SVD of the (small) centred cloud, as pca() does
        Zs = np.concatenate([block(s)[0].copy() for s in range(0, n, chunk)]) / np.float32(scale)
        V, var = pca(Zs, d)
        P = np.ascontiguousarray(Zs @ V)
    else:
        with blas_threads(1):
            w, V = np.linalg.eigh(C / (scale * scale * max(n - 1, 1)))
        order = np.argsort(w)[::-1][:d]
        V, var = np.ascontiguousarray(V[:, order], dtype=np.float32), np.maximum(w[order], 0.0)
        Vs = V / np.float32(scale)  # the scale folded into the projection
        P = np.empty((n, d), np.float32)
        skew = np.zeros(d)
        for s in range(0, n, chunk):
            Ps = P[s:s + chunk]
            np.matmul(block(s)[0], Vs, out=Ps)
            skew += (Ps * Ps * Ps).sum(0, dtype=np.float64)
        sign = np.where(skew < 0, -1.0, 1.0).astype(np.float32)
        V *= sign
        for s in range(0, n, chunk):
            P[s:s + chunk] *= sign
    if rows_l2:  # cosine geometry (what retrieval and the metrics use); the stored scale uses the mean norm
        scale *= rsum / n
    return P, var, mean, V, scale


def rotation_from(prep: Prep, R: np.ndarray, method: str, scale_fit: float = 1.0, meta=None) -> Rotation:
    """Wrap a rotation between the PCA bases as a map from X's raw space to Y's.

    Parameters
    ----------
    prep : the :class:`Prep` the rotation was found in
    R : (d, d) orthogonal, ``prep.A @ R ~ prep.B``
    method : the map's method name (stored)
    scale_fit : a scale found on top of the sides' own (1: none)
    meta : stored in the map's metadata

    Returns
    -------
    Rotation: ``transform`` maps (N, D1) -> (N, D2)
    """
    s = prep.sy / prep.sx * scale_fit
    Vx, Vy = prep.Vx.astype(np.float32), prep.Vy.astype(np.float32)
    if Vx.shape[0] == Vx.shape[1] and Vy.shape[0] == Vy.shape[1]:  # square bases: fold them into R
        return Rotation(method, prep.mx.astype(np.float32), prep.my.astype(np.float32),
                        (Vx @ R.astype(np.float32) @ Vy.T), None, None, float(s), meta or {})
    return Rotation(method, prep.mx.astype(np.float32), prep.my.astype(np.float32), R.astype(np.float32),
                    Vx, Vy, float(s), meta or {})


def weighted_procrustes(A, B, w=None):
    """The orthogonal R minimising sum_i w_i ||A_i R - B_i||^2 over paired rows.

    Parameters
    ----------
    A : (n, m), B : (n, m) rows already paired
    w : (n,) non-negative weights, or None (all 1)

    Returns
    -------
    np.ndarray, shape (m, m), float32
    """
    M = (A.T * w) @ B if w is not None else A.T @ B
    U, _, Vt = svd(M.astype(np.float64))
    return (U @ Vt).astype(np.float32)


def cross_cov(A, B, perm, ok, chunk: int = PREP_CHUNK):
    """A[ok]^T B[perm[ok]] summed in float64 over blocks of ``chunk`` rows (no N x d gather).

    Parameters
    ----------
    A : (N1, d), B : (N2, d)
    perm : (N1,) the row of B matched to each row of A
    ok : (N1,) bool, the rows of A to count
    chunk : rows per block

    Returns
    -------
    np.ndarray, shape (d, d), float64
    """
    M = np.zeros((A.shape[1], B.shape[1]))
    for s in range(0, len(A), chunk):  # blocks of a few MB: reused memory, not fresh pages
        o = ok[s:s + chunk]
        M += A[s:s + chunk][o].T @ B[perm[s:s + chunk][o]]
    return M


def check_seeds(seeds, n1: int, n2: int):
    """Validate known pairs [(i, j), ...]: integer rows inside X (n1 rows) and Y (n2 rows), each row once.
    Returns two int64 arrays (empty when ``seeds`` is None or empty)."""
    if seeds is None or len(seeds) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    try:
        S = np.asarray(seeds)
        ok = S.ndim == 2 and S.shape[1] == 2 and np.issubdtype(S.dtype, np.integer)
    except Exception:
        ok = False
    if not ok:
        raise AlignmentError("seeds must be a list of integer (x_row, y_row) pairs, e.g. [(0, 12), (5, 3)]")
    for c, (n, side) in enumerate(((n1, "X"), (n2, "Y"))):
        bad = np.flatnonzero((S[:, c] < 0) | (S[:, c] >= n))
        if len(bad):
            raise AlignmentError(f"seed pair {bad[0]} {tuple(int(v) for v in S[bad[0]])} names row "
                                 f"{int(S[bad[0], c])} of {side}, which has {n} rows (valid: 0..{n - 1})")
        if len(np.unique(S[:, c])) != len(S):
            raise AlignmentError(f"seeds name a row of {side} twice; a seed pair is one-to-one")
    return S[:, 0].astype(np.int64), S[:, 1].astype(np.int64)


# The names these had before they were public, for the modules still importing them (alignment.pairfree,
# starts, rosetta): drop once those import the public names.
