"""Linear maps from image-embedding space to text-embedding space, fitted from pairs or given.

All maps share one form, so that the evaluation can swap them freely::

    transform(x) = ((x - mean_x) @ proj_x @ R) * scale @ proj_y.T + mean_y        # (N, D_x) -> (N, D_y)

``proj_x`` (D_x, d) and ``proj_y`` (D_y, d) are orthonormal bases of a shared d-dimensional space (PCA of
each side) or absent; ``R`` is (d, d) orthogonal for a :class:`Rotation` (Procrustes, pair-free, random),
(D_x, D_y) semi-orthogonal for the "learned" shared space, or any matrix for a :class:`RidgeMap`.

A map saves to a safetensors (or npz) file of arrays plus a JSON sidecar with the method, dimensions,
encoder fingerprints, datasets and creation time, and refuses to load against another encoder or dimension.

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

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from alignment._checks import as_matrix, blas_threads, check_pair, float_dtype, is_torch, to_numpy
from alignment.errors import AlignmentError, MismatchError

FORMAT_VERSION = 1
# Fingerprint fields that change the embedding space; others (e.g. a display name) may differ freely.
FINGERPRINT_FIELDS = ("name", "weights_hash", "dim", "pooling", "modality")


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
    U, s, Vt = _svd(M)
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
    skew = (P ** 3).mean(0)
    V = V * np.where(skew < 0, -1.0, 1.0).astype(V.dtype)
    return V, np.maximum(np.asarray(var, dtype=np.float64), 0.0)


def random_orthogonal(d: int, seed: int = 0, dtype=np.float64) -> np.ndarray:
    """A Haar-distributed random (d, d) orthogonal matrix (QR of a Gaussian with the sign fix)."""
    rng = np.random.default_rng(seed)
    with blas_threads(1):
        Qm, Rm = np.linalg.qr(rng.standard_normal((d, d)))
    return (Qm * np.sign(np.diag(Rm))).astype(dtype)


# ----------------------------------------------------------------------------------------------- the maps
@dataclass
class LinearMap:
    """An affine map from image space (D_x) to text space (D_y); see the module docstring for the form.

    Attributes
    ----------
    method : "procrustes", "pairfree", "ridge", "random", ...
    mean_x : (D_x,) ; mean_y : (D_y,)
    R : (d, d) core, or (D_x, D_y) when there are no projections
    proj_x : (D_x, d) or None ; proj_y : (D_y, d) or None
    scale : float
    meta : dict, saved in the JSON sidecar (encoders, datasets, pairs used, fit statistics ...)
    """

    method: str
    mean_x: np.ndarray
    mean_y: np.ndarray
    R: np.ndarray
    proj_x: np.ndarray | None = None
    proj_y: np.ndarray | None = None
    scale: float = 1.0
    meta: dict = field(default_factory=dict)

    orthogonal = False  # class-level: is R orthogonal (an isometry up to scale)?

    def __post_init__(self):
        dx, dy = self.mean_x.shape[0], self.mean_y.shape[0]
        rin = self.proj_x.shape[1] if self.proj_x is not None else dx
        rout = self.proj_y.shape[1] if self.proj_y is not None else dy
        if self.proj_x is not None and self.proj_x.shape[0] != dx:
            raise AlignmentError(f"proj_x is {self.proj_x.shape}, expected ({dx}, d)")
        if self.proj_y is not None and self.proj_y.shape[0] != dy:
            raise AlignmentError(f"proj_y is {self.proj_y.shape}, expected ({dy}, d)")
        if self.R.shape != (rin, rout):
            raise AlignmentError(f"R is {self.R.shape}, expected ({rin}, {rout}) for these projections")

    # shapes
    @property
    def dim_x(self) -> int:
        return int(self.mean_x.shape[0])

    @property
    def dim_y(self) -> int:
        return int(self.mean_y.shape[0])

    @property
    def dim(self) -> int:
        """Size of the shared space the core acts in."""
        return int(self.R.shape[1])

    def matrix(self) -> np.ndarray:
        """The whole linear part as one (D_x, D_y) matrix."""
        W = self.R * self.scale
        if self.proj_x is not None:
            W = self.proj_x @ W
        if self.proj_y is not None:
            W = W @ self.proj_y.T
        return W

    def transform(self, X, add_mean: bool = True):
        """Map image-space rows to text space.

        Parameters
        ----------
        X : (N, D_x) numpy array or torch tensor (returned as the same kind, on the same device)
        add_mean : add the text-side mean back (True: land in text space proper; False: centred text space)

        Returns
        -------
        (N, D_y) array
        """
        torch_in = is_torch(X)
        A = to_numpy(X, "X")
        if A.ndim == 1:
            A = A[None]
        if A.ndim != 2 or A.shape[1] != self.dim_x:
            raise AlignmentError(
                f"this {self.method} map takes {self.dim_x}-dimensional image embeddings "
                f"({_enc_name(self.meta.get('x_encoder'))}), got shape {tuple(A.shape)}; embed with the encoder it "
                "was fitted for, or refit the map")
        if A.shape[0] and not np.isfinite(A).all():
            raise AlignmentError("X contains NaN or inf; the map cannot transform it")
        dt = np.float64 if A.dtype == np.float64 else np.float32
        Z = A.astype(dt, copy=False) - self.mean_x.astype(dt)
        if self.proj_x is not None:
            Z = Z @ self.proj_x.astype(dt)  # (N, d)
        Z = (Z @ self.R.astype(dt)) * dt(self.scale)
        if self.proj_y is not None:
            Z = Z @ self.proj_y.T.astype(dt)  # (N, D_y)
        if add_mean:
            Z = Z + self.mean_y.astype(dt)
        if torch_in:
            import torch

            return torch.from_numpy(np.ascontiguousarray(Z)).to(device=X.device, dtype=X.dtype)
        return Z

    __call__ = transform

    # persistence
    def _arrays(self) -> dict:
        arr = {"mean_x": self.mean_x, "mean_y": self.mean_y, "R": self.R}
        if self.proj_x is not None:
            arr["proj_x"] = self.proj_x
        if self.proj_y is not None:
            arr["proj_y"] = self.proj_y
        return {k: np.ascontiguousarray(v) for k, v in arr.items()}

    def save(self, path) -> Path:
        """Write ``<path>.safetensors`` (or ``.npz`` when asked, or without safetensors) and ``<path>.json``.

        Returns the array file's path. Both files are written atomically; the sidecar goes last, so a
        map counts as saved only when its sidecar exists."""
        path = _array_path(path)
        arrays = self._arrays()
        if path.suffix == ".npz":
            import io

            buf = io.BytesIO()
            np.savez(buf, **arrays)
            blob = buf.getvalue()
        else:
            from safetensors.numpy import save

            blob = save(arrays)
        meta = {
            **self.meta,
            "format": FORMAT_VERSION, "class": type(self).__name__, "method": self.method,
            "dim_x": self.dim_x, "dim_y": self.dim_y, "dim": self.dim, "scale": float(self.scale),
            "orthogonal": self.orthogonal, "arrays": path.name,
            "arrays_sha256": hashlib.sha256(blob).hexdigest(),
        }
        meta.setdefault("created", time.strftime("%Y-%m-%dT%H:%M:%S"))
        _atomic_write(path, blob)
        _atomic_write(path.with_suffix(".json"), (json.dumps(jsonable(meta), indent=2, sort_keys=True) + "\n").encode())
        return path

    @classmethod
    def load(cls, path, x_encoder: dict | None = None, y_encoder: dict | None = None,
             x_dim: int | None = None, y_dim: int | None = None) -> "LinearMap":
        """Load a saved map; refuse it if it was fitted for another encoder or dimension.

        Parameters
        ----------
        path : the array file, its JSON sidecar, or the stem given to :meth:`save`
        x_encoder, y_encoder : encoder fingerprints ({"name", "dim", "pooling", "weights_hash", ...}) the
            map will be used with; every field present on both sides must agree
        x_dim, y_dim : dimensions the map will be used with

        Raises
        ------
        MismatchError naming the side and the fields that differ; AlignmentError for missing or damaged files.
        """
        side, arr_path = _find_files(path)
        meta, arrays = _read_files(side, arr_path)
        klass = _CLASSES.get(meta.get("class"), cls)
        known = {"format", "class", "method", "dim_x", "dim_y", "dim", "scale", "orthogonal", "arrays",
                 "arrays_sha256"}
        try:
            m = klass(method=meta["method"], mean_x=arrays["mean_x"], mean_y=arrays["mean_y"], R=arrays["R"],
                      proj_x=arrays.get("proj_x"), proj_y=arrays.get("proj_y"), scale=float(meta.get("scale", 1.0)),
                      meta={k: v for k, v in meta.items() if k not in known or k in ("format",)})
        except (KeyError, TypeError, ValueError) as e:
            raise AlignmentError(f"{arr_path}: incomplete map ({type(e).__name__}: {e}); the files are damaged, "
                                 "refit the map") from None
        m.meta["path"] = str(arr_path)
        if (m.dim_x, m.dim_y) != (meta.get("dim_x"), meta.get("dim_y")):
            raise AlignmentError(f"{arr_path}: arrays are {m.dim_x} -> {m.dim_y} but {side.name} says "
                                 f"{meta.get('dim_x')} -> {meta.get('dim_y')}; the files are inconsistent")
        m.check(x_encoder=x_encoder, y_encoder=y_encoder, x_dim=x_dim, y_dim=y_dim, where=str(arr_path))
        return m

    def check(self, x_encoder=None, y_encoder=None, x_dim=None, y_dim=None, where: str = "map"):
        """Raise MismatchError unless the map fits these encoders / dimensions (None: not checked)."""
        for sidename, given, dim_given, stored, dim_stored in (
                ("image", x_encoder, x_dim, self.meta.get("x_encoder"), self.dim_x),
                ("text", y_encoder, y_dim, self.meta.get("y_encoder"), self.dim_y)):
            if given is not None and given.get("dim") is not None and dim_given is None:
                dim_given = given.get("dim")
            if dim_given is not None and int(dim_given) != dim_stored:
                raise MismatchError(
                    f"{where}: fitted for {dim_stored}-dimensional {sidename} embeddings "
                    f"({_enc_name(stored)}), not {dim_given}-dimensional ({_enc_name(given)}); refit the map "
                    "for this encoder")
            if given is not None and stored:
                diff = [f for f in FINGERPRINT_FIELDS
                        if given.get(f) is not None and stored.get(f) is not None and given.get(f) != stored.get(f)]
                if diff:
                    detail = ", ".join(f"{f} {stored.get(f)!r} vs {given.get(f)!r}" for f in diff)
                    raise MismatchError(f"{where}: fitted for {sidename} encoder {_enc_name(stored)}, not "
                                        f"{_enc_name(given)} ({detail}); refit the map for this encoder")


class Rotation(LinearMap):
    """A linear map whose core is orthogonal (Procrustes, pair-free, random): an isometry up to ``scale``."""

    orthogonal = True

    def inverse_transform(self, Y, add_mean: bool = True):
        """Text space -> image space (exact when the projections are square; else into their span).

        Y : (N, D_y) -> (N, D_x)"""
        torch_in = is_torch(Y)
        B = to_numpy(Y, "Y")
        if B.ndim == 1:
            B = B[None]
        if B.ndim != 2 or B.shape[1] != self.dim_y:
            raise AlignmentError(f"this map takes {self.dim_y}-dimensional text embeddings back "
                                 f"({_enc_name(self.meta.get('y_encoder'))}), got shape {tuple(B.shape)}")
        dt = np.float64 if B.dtype == np.float64 else np.float32
        Z = B.astype(dt, copy=False) - self.mean_y.astype(dt)
        if self.proj_y is not None:
            Z = Z @ self.proj_y.astype(dt)
        Z = (Z @ self.R.T.astype(dt)) / dt(self.scale)
        if self.proj_x is not None:
            Z = Z @ self.proj_x.T.astype(dt)
        if add_mean:
            Z = Z + self.mean_x.astype(dt)
        if torch_in:
            import torch

            return torch.from_numpy(np.ascontiguousarray(Z)).to(device=Y.device, dtype=Y.dtype)
        return Z


class RidgeMap(LinearMap):
    """A least-squares (ridge) map: not orthogonal; the upper bound one linear map can reach from pairs."""


_CLASSES = {"LinearMap": LinearMap, "Rotation": Rotation, "RidgeMap": RidgeMap}


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
    U, sv, Vt = _svd(M.astype(dt) if M.shape[0] > 256 else M)
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


def _svd(M):
    """Thin SVD; scipy's gesdd is about twice as fast as numpy's wrapper here."""
    from scipy.linalg import LinAlgError, svd

    with blas_threads(1):
        try:
            return svd(M, full_matrices=False, check_finite=False, lapack_driver="gesdd")
        except LinAlgError:  # gesdd can fail to converge on nasty inputs; gesvd is slower and sturdier
            return svd(M, full_matrices=False, check_finite=False, lapack_driver="gesvd")


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

    X : (N_x, D_x), Y : (N_y, D_y); no pairing is used (only each side's mean and axes).
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


def load_map(path, **kw) -> LinearMap:
    """Load any saved map (Rotation or RidgeMap); see :meth:`LinearMap.load`."""
    return LinearMap.load(path, **kw)


# ----------------------------------------------------------------------------------------------- helpers
def _enc_name(fp) -> str:
    if not fp:
        return "no encoder recorded"
    return f"{fp.get('name')!r}" + (f", dim={fp.get('dim')}" if fp.get("dim") is not None else "")


def _array_path(path) -> Path:
    path = Path(path)
    if path.suffix == ".json":
        path = path.with_suffix(".safetensors")
    if path.suffix not in (".safetensors", ".npz"):
        path = path.with_name(path.name + ".safetensors")
    return path


def _find_files(path):
    path = Path(path)
    cands = [path] if path.suffix in (".safetensors", ".npz") else []
    stem = path.with_suffix("") if path.suffix in (".safetensors", ".npz", ".json") else path
    cands += [stem.with_name(stem.name + ".safetensors"), stem.with_name(stem.name + ".npz")]
    if path.suffix not in (".safetensors", ".npz", ".json"):
        cands += [path.with_name(path.name + ".safetensors"), path.with_name(path.name + ".npz")]
    for c in cands:
        side = c.with_suffix(".json")
        if c.exists() and side.exists():
            return side, c
    raise AlignmentError(f"{path}: no saved map here (need the .safetensors/.npz file and its .json sidecar); "
                         "fit one with `captioner align fit`")


def _read_files(side: Path, arr_path: Path) -> tuple[dict, dict]:
    """(sidecar dict, arrays) of a saved map; AlignmentError naming the file when either is damaged."""
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise AlignmentError(f"{side}: not valid JSON ({e}); the sidecar is damaged, refit the map") from None
    if not isinstance(meta, dict) or not meta.get("arrays_sha256"):
        raise AlignmentError(f"{side}: records no arrays_sha256; the sidecar is damaged or edited, refit the map")
    blob = arr_path.read_bytes()
    if hashlib.sha256(blob).hexdigest() != meta["arrays_sha256"]:
        raise AlignmentError(f"{arr_path}: contents do not match the hash in {side.name}; the file is "
                             "damaged or was replaced, refit the map")
    try:
        if arr_path.suffix == ".npz":
            import io

            with np.load(io.BytesIO(blob)) as z:
                return meta, {k: z[k] for k in z.files}
        from safetensors.numpy import load

        return meta, load(blob)
    except Exception as e:  # noqa: BLE001 - numpy / safetensors raise their own types on bad bytes
        raise AlignmentError(f"{arr_path}: unreadable arrays ({type(e).__name__}); refit the map") from None


def _atomic_write(path: Path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def jsonable(o, max_array: int | None = None):
    """``o`` with numpy values and paths made JSON-friendly; arrays of more than ``max_array`` elements
    (None: no limit) are summarised by their shape."""
    if isinstance(o, dict):
        return {str(k): jsonable(v, max_array) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [jsonable(v, max_array) for v in o]
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist() if max_array is None or o.size <= max_array else f"<array {o.shape}>"
    if isinstance(o, Path):
        return str(o)
    return o
