"""Linear maps from image-embedding space to text-embedding space: the map objects, their files and checks
(the fits that make them are in :mod:`alignment.procrustes`).

All maps share one form, so that the evaluation can swap them freely::

    transform(x) = ((x - mean_x) @ proj_x @ R) * scale @ proj_y.T + mean_y        # (N, D_x) -> (N, D_y)

``proj_x`` (D_x, d) and ``proj_y`` (D_y, d) are orthonormal bases of a shared d-dimensional space (PCA of
each side) or absent; ``R`` is (d, d) orthogonal for a :class:`Rotation` (Procrustes, pair-free, random),
(D_x, D_y) semi-orthogonal for the "learned" shared space, or any matrix for a :class:`RidgeMap`.

A map saves to a safetensors (or npz) file of arrays plus a JSON sidecar with the method, dimensions,
encoder fingerprints, datasets and creation time, and refuses to load against another encoder or dimension.

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

from alignment._checks import is_torch, to_numpy
from alignment.errors import AlignmentError, MismatchError

FORMAT_VERSION = 1
# Fingerprint fields that change the embedding space; others (e.g. a display name) may differ freely.
FINGERPRINT_FIELDS = ("name", "weights_hash", "dim", "pooling", "modality")


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
    EXTRA_ARRAYS = ()  # class-level (not a field): further array fields a subclass saves and loads

    def _arrays(self) -> dict:
        arr = {"mean_x": self.mean_x, "mean_y": self.mean_y, "R": self.R}
        if self.proj_x is not None:
            arr["proj_x"] = self.proj_x
        if self.proj_y is not None:
            arr["proj_y"] = self.proj_y
        arr.update({k: getattr(self, k) for k in self.EXTRA_ARRAYS})
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
        klass = MAP_CLASSES.get(meta.get("class"), cls)
        known = {"format", "class", "method", "dim_x", "dim_y", "dim", "scale", "orthogonal", "arrays",
                 "arrays_sha256"}
        try:
            m = klass(method=meta["method"], mean_x=arrays["mean_x"], mean_y=arrays["mean_y"], R=arrays["R"],
                      proj_x=arrays.get("proj_x"), proj_y=arrays.get("proj_y"), scale=float(meta.get("scale", 1.0)),
                      meta={k: v for k, v in meta.items() if k not in known or k in ("format",)},
                      **{k: arrays[k] for k in klass.EXTRA_ARRAYS})
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


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise softmax of ``logits / temperature`` in float64 (stable).

    Parameters
    ----------
    logits : (N, C)
    temperature : > 0

    Returns
    -------
    np.ndarray, shape (N, C), rows summing to 1
    """
    if not temperature > 0:
        raise AlignmentError(f"temperature must be > 0, not {temperature}")
    z = np.asarray(logits, np.float64) / float(temperature)
    z -= z.max(1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(1, keepdims=True)
    return z


def _unit(A: np.ndarray) -> np.ndarray:
    return A / np.maximum(np.linalg.norm(A, axis=1, keepdims=True), 1e-12)


@dataclass
class HeadQueryMap(Rotation):
    """The ``head`` rotation plus the image encoder's own classifier read in text space (no pair either).

    For an image x: z = the rotation's centred output, c = sum_c p(c | x) e_c - mean_y (the head's class
    probabilities at ``meta["head_query"]["temperature"]`` over the unit class-prompt embeddings, centred on the
    text mean), and the map returns ``mean_y + |z| * unit(unit(z) + w * unit(c))``, w =
    ``meta["head_query"]["weight"]``: the direction of both queries summed, at the rotation's length. The
    rotation carries what the head's 1000 classes do not name; the class query is sharper where they do.
    ``inverse_transform`` inverts the rotation part only."""

    head_W: np.ndarray | None = None   # (C, D_x) the classifier's weights
    head_b: np.ndarray | None = None   # (C,)
    class_E: np.ndarray | None = None  # (C, D_y) unit embeddings of the class prompts

    EXTRA_ARRAYS = ("head_W", "head_b", "class_E")

    def __post_init__(self):
        super().__post_init__()
        C = None if self.head_W is None else self.head_W.shape
        if (C is None or self.head_b is None or self.class_E is None or C[1] != self.dim_x
                or self.head_b.shape != (C[0],) or self.class_E.shape != (C[0], self.dim_y)):
            raise AlignmentError(f"head query map: head {C}, bias {getattr(self.head_b, 'shape', None)} and class "
                                 f"embeddings {getattr(self.class_E, 'shape', None)} do not fit a "
                                 f"{self.dim_x} -> {self.dim_y} map")

    def transform(self, X, add_mean: bool = True):
        Z = super().transform(X, add_mean=False)
        torch_in = is_torch(Z)
        Zn = to_numpy(Z, "Z")
        A = to_numpy(X, "X")
        A = A[None] if A.ndim == 1 else A
        q = self.meta.get("head_query", {})
        P = softmax(A.astype(np.float64) @ self.head_W.T.astype(np.float64) + self.head_b,
                    float(q.get("temperature", 1.0)))
        C = P @ self.class_E.astype(np.float64) - self.mean_y
        length = np.linalg.norm(Zn, axis=1, keepdims=True)
        out = _unit(_unit(Zn.astype(np.float64)) + float(q.get("weight", 0.5)) * _unit(C)) * length
        if add_mean:
            out = out + self.mean_y
        out = out.astype(Zn.dtype)
        if torch_in:
            import torch

            return torch.from_numpy(np.ascontiguousarray(out)).to(device=Z.device, dtype=Z.dtype)
        return out

    __call__ = transform


MAP_CLASSES = {"LinearMap": LinearMap, "Rotation": Rotation, "RidgeMap": RidgeMap, "HeadQueryMap": HeadQueryMap}


def load_map(path, **kw) -> LinearMap:
    """Load any saved map (Rotation, RidgeMap, HeadQueryMap); see :meth:`LinearMap.load`.

    Parameters
    ----------
    path : the ``.safetensors`` file (its ``.json`` sidecar beside it)
    **kw : ``x_encoder``, ``y_encoder`` fingerprints (or ``dim_x``, ``dim_y``) the map must fit

    Returns
    -------
    LinearMap (its saved class); ``transform`` maps (N, D_x) -> (N, D_y)

    Raises
    ------
    MismatchError : fitted for other encoders or dimensions (the message says which)
    AlignmentError : a missing, damaged or foreign file
    """
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
