"""The pipeline's maps from image space into text space: each ``captioner.rotations`` kind loaded from its
cache file or fitted and saved (one process fits, the others wait and load), and their folded serving
form. A part of :class:`captioner.pipeline.Pipeline`, which it reads through its public methods only
(``encoder``, ``bank``, ``train_set``, ``artifact_key``, ``log``, ``lock``)."""
from __future__ import annotations

import time
from pathlib import Path

from captioner.artifacts import key_lock, quarantine
from captioner.errors import CacheMismatchError, CaptionerError


class PipelineRotations:
    """The maps of one pipeline, by kind.

    Parameters
    ----------
    pipe : the Pipeline whose encoders, train set and bank the maps are fitted on.
    files : {kind: path} saved maps to use instead of fitting (checked against the encoders).
    pairfree_max : at most this many images and captions go into the pair-free matcher.
    """

    def __init__(self, pipe, files: dict | None = None, pairfree_max: int = 2000):
        self.pipe = pipe
        self.files = dict(files or {})
        self.pairfree_max = pairfree_max
        self.maps: dict = {}     # kind -> the map in use
        self._affine: dict = {}  # kind -> (map, its folded AffineMap)

    def fit_options(self, kind: str) -> dict:
        """The pipeline's own options for a kind (on top of the kind's defaults)."""
        return {"max": self.pairfree_max} if kind == "pairfree" else {}

    def get(self, kind: str = "paired"):
        """The map ``kind`` (a ``captioner.rotations`` kind or alias), loaded from its cache file or fitted
        and saved. (D_img) -> (D_txt) through ``transform``."""
        from alignment.errors import AlignmentError, MismatchError
        from alignment.maps import load_map
        from captioner.rotations import get_kind

        pipe = self.pipe
        kind = get_kind(kind).name
        with pipe.lock:
            if kind in self.maps:
                return self.maps[kind]
            fx, fy = pipe.encoder("image").fingerprint(), pipe.encoder("text").fingerprint()
            if kind in self.files:
                try:
                    m = load_map(self.files[kind], x_encoder=fx, y_encoder=fy)
                except MismatchError as e:
                    raise CacheMismatchError(str(e)) from None
                except AlignmentError as e:
                    raise CaptionerError(str(e)) from None
                self.maps[kind] = m
                return m
            from captioner.paths import slug, subdir
            from captioner.rotations import PipelineSource, key_params

            opts = self.fit_options(kind)
            path = subdir("rotations") / (f"{kind}-{slug(pipe.image_encoder, 40)}-{slug(pipe.text_encoder, 40)}-"
                                          f"{pipe.artifact_key(kind, key_params(kind, **opts))}.safetensors")
            with key_lock(path, what=f"the {kind} rotation {path.name}"):  # one process fits, the others load
                m = load_or_heal(path, fx, fy)
                if m is None:
                    t0 = time.time()
                    pipe.log(f"fitting the {kind} map ({pipe.image_encoder} -> {pipe.text_encoder})")
                    try:
                        m = get_kind(kind).fit(PipelineSource(pipe, fx, fy), **opts).map
                    except AlignmentError as e:
                        raise CaptionerError(f"fitting the {kind} map failed: {e}") from None
                    m.meta["fit_seconds"] = round(time.time() - t0, 3)
                    m.save(path)
            self.maps[kind] = m
            return m

    def use(self, kind: str, m) -> None:
        """Use the map ``m`` as ``kind`` (memory only). ``m`` must map (D_img) -> (D_txt) of these encoders."""
        from captioner.rotations import get_kind

        pipe = self.pipe
        kind = get_kind(kind).name
        if m.dim_x != pipe.encoder("image").dim or m.dim_y != pipe.encoder("text").dim:
            raise CaptionerError(f"the map is {m.dim_x} -> {m.dim_y}, the encoders are "
                                 f"{pipe.encoder('image').dim} -> {pipe.encoder('text').dim}")
        with pipe.lock:
            self.maps[kind] = m

    def serving(self, kind: str = "paired"):
        """The map ``kind`` for one-image requests: a linear map folded into one float32 affine
        ``(X - mean_x) @ W + mean_y`` (what ``transform`` computes, to float noise, in ~0.1 ms instead of
        ~10 ms: no per-call copies of the projections, one matrix product instead of three). Other maps,
        and inputs the folded form would not check (wrong width, NaN), go through the map itself."""
        m = self.get(kind)
        with self.pipe.lock:
            hit = self._affine.get(kind)
            if hit is None or hit[0] is not m:
                from captioner.retrieval import AffineMap

                hit = (m, AffineMap.of(m))
                self._affine[kind] = hit
            return hit[1]


def load_or_heal(path: Path, fx: dict, fy: dict):
    """The cached map at ``path``; None when there is none, or when it was damaged (then it is moved aside,
    named in one line, to be fitted again)."""
    from alignment.errors import AlignmentError, MismatchError
    from alignment.maps import load_map

    side = path.with_suffix(".json")
    if not (path.exists() and side.exists()):
        return None
    try:
        return load_map(path, x_encoder=fx, y_encoder=fy)
    except MismatchError as e:
        raise CacheMismatchError(str(e)) from None
    except AlignmentError as e:
        quarantine(path, str(e).split(": ", 1)[-1].split(";")[0], side)
        return None
