"""What the pair-free matchers share: the result type, the centring / scaling / PCA of both clouds, the
rotation between the two PCA bases as a map of the raw spaces, and weighted Procrustes on paired rows."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from alignment._checks import as_matrix
from alignment.errors import AlignmentError
from alignment.procrustes import Rotation, _svd, pca


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
class _Prep:
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


def _prepare(X, Y, dim, normalize=True, rows_l2=False) -> _Prep:
    X = as_matrix(X, "X", min_rows=3)
    Y = as_matrix(Y, "Y", min_rows=3)
    n1, D1 = X.shape
    n2, D2 = Y.shape
    d = min(D1, D2) if dim is None else int(dim)
    if d < 1 or d > min(D1, D2):
        raise AlignmentError(f"dim={dim} must be between 1 and min(D1, D2) = {min(D1, D2)}")
    d = min(d, n1 - 1, n2 - 1)
    dt = np.float32
    mx = X.mean(0, dtype=np.float64)
    my = Y.mean(0, dtype=np.float64)
    Xc = (X - mx).astype(dt)
    Yc = (Y - my).astype(dt)
    if rows_l2:  # cosine geometry (what retrieval and the metrics use); the stored scale uses the mean norm
        nx_, ny_ = np.linalg.norm(Xc, axis=1, keepdims=True), np.linalg.norm(Yc, axis=1, keepdims=True)
        rx, ry = float(nx_.mean()), float(ny_.mean())
        Xc /= np.maximum(nx_, 1e-12)
        Yc /= np.maximum(ny_, 1e-12)
    sx = float(np.sqrt(np.einsum("ij,ij->", Xc, Xc, dtype=np.float64) / n1)) if normalize else 1.0
    sy = float(np.sqrt(np.einsum("ij,ij->", Yc, Yc, dtype=np.float64) / n2)) if normalize else 1.0
    if sx == 0 or sy == 0:
        raise AlignmentError("X or Y has zero variance; nothing to match")
    Xc /= sx
    Yc /= sy
    if rows_l2:
        sx, sy = sx * rx, sy * ry
    Vx, va = pca(Xc, d)
    Vy, vb = pca(Yc, d)
    return _Prep(np.ascontiguousarray(Xc @ Vx), np.ascontiguousarray(Yc @ Vy), va, vb, mx, my, Vx, Vy, sx, sy)


def _rotation_from(prep: _Prep, R: np.ndarray, method: str, scale_fit: float = 1.0, meta=None) -> Rotation:
    """Wrap a (d, d) rotation between the PCA bases as a map from X's raw space to Y's raw space."""
    s = prep.sy / prep.sx * scale_fit
    Vx, Vy = prep.Vx.astype(np.float32), prep.Vy.astype(np.float32)
    if Vx.shape[0] == Vx.shape[1] and Vy.shape[0] == Vy.shape[1]:  # square bases: fold them into R
        return Rotation(method, prep.mx.astype(np.float32), prep.my.astype(np.float32),
                        (Vx @ R.astype(np.float32) @ Vy.T), None, None, float(s), meta or {})
    return Rotation(method, prep.mx.astype(np.float32), prep.my.astype(np.float32), R.astype(np.float32),
                    Vx, Vy, float(s), meta or {})


def _procrustes(A, B, w=None):
    """R (m, m) orthogonal minimising sum_i w_i ||A_i R - B_i||^2 (rows already paired)."""
    M = (A.T * w) @ B if w is not None else A.T @ B
    U, _, Vt = _svd(M.astype(np.float64))
    return (U @ Vt).astype(np.float32)
