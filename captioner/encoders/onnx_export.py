"""A torch image model run through onnxruntime: exported once per machine, checked against torch on load.

On CPU, onnxruntime runs EfficientNet-Lite0 about 3x faster per image than torch eager (it folds the
batch norms into the convolutions and fuses the activations), at float-noise distance from torch (relative
error ~1e-6). The exported graph is cached under ``$CAPTIONER_HOME/onnx``, named by the encoder, its input
size, the weights hash and the torch version, so a change of any of them exports again.

The export uses torch's TorchScript-based exporter (``dynamo=False``: no ``onnxscript`` needed). Its last
step inserts custom onnxscript functions into the model and imports the ``onnx`` package to do so; this
model has none, so where ``onnx`` is not installed that step is skipped (it would return the bytes
unchanged). Anything failing here raises, and the encoder falls back to torch.
"""
from __future__ import annotations

import contextlib
import logging
import re
import threading
import warnings
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

# Largest relative difference (max |ort - torch| / max |torch|) accepted when a model is loaded.
CHECK_RTOL = 1e-4


def feature_module(model):
    """``extract_features`` then the global mean, as the encoder computes it."""
    import torch

    class Features(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m.extract_features(x).mean((2, 3))

    return Features(model).eval()


@contextlib.contextmanager
def without_onnx_package():
    """Let the TorchScript exporter finish without the ``onnx`` package (see the module docstring)."""
    try:
        import onnx  # noqa: F401
    except ImportError:
        pass
    else:
        yield
        return
    from torch.onnx._internal.torchscript_exporter import onnx_proto_utils as opu

    orig = opu._add_onnxscript_fn
    opu._add_onnxscript_fn = lambda model_bytes, custom_opsets: model_bytes
    try:
        yield
    finally:
        opu._add_onnxscript_fn = orig


def export_onnx(model, size: int, path: str | Path) -> Path:
    """Export ``model.extract_features(x).mean((2, 3))`` for (N, 3, size, size) float32 inputs (N dynamic)
    to ``path`` (written atomically)."""
    import io

    import torch

    from captioner.paths import atomic_write_bytes

    path = Path(path)
    mod = feature_module(model)
    was_cl = next(model.parameters()).is_contiguous(memory_format=torch.channels_last)
    buf = io.BytesIO()
    try:
        model.to(memory_format=torch.contiguous_format)
        with warnings.catch_warnings(), without_onnx_package(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(mod, (torch.zeros(1, 3, size, size),), buf, input_names=["x"],
                              output_names=["features"], dynamic_axes={"x": {0: "n"}, "features": {0: "n"}},
                              opset_version=17, dynamo=False)
    finally:
        if was_cl:
            model.to(memory_format=torch.channels_last)
    atomic_write_bytes(path, buf.getvalue())
    return path


class OnnxModel:
    """``model(a)``: (N, 3, H, W) float32 array -> (N, D) float32 array, through onnxruntime with as many
    intra-op threads as torch currently uses (one session per thread count, made on first use)."""

    def __init__(self, path: str | Path):
        import onnxruntime  # noqa: F401 - fail here, not on the first call

        self.path = Path(path)
        self._bytes = self.path.read_bytes()
        self._sessions: dict[int, object] = {}
        self._lock = threading.Lock()

    @staticmethod
    def threads() -> int:
        from captioner.threads import count

        return count()

    def session(self, threads: int | None = None):
        import onnxruntime as ort

        from captioner.threads import ort_options

        n = threads or self.threads()
        with self._lock:
            if n not in self._sessions:
                so = ort_options(n)  # a shared machine: idle workers sleep, not spin (captioner.threads)
                self._sessions[n] = ort.InferenceSession(self._bytes, so, providers=["CPUExecutionProvider"])
            return self._sessions[n]

    def __call__(self, a: np.ndarray) -> np.ndarray:
        a = np.ascontiguousarray(a, dtype=np.float32)
        return self.session().run(None, {"x": a})[0]

    @classmethod
    def for_encoder(cls, enc, check: bool = True) -> "OnnxModel":
        """The cached export for an image encoder with ``model``, ``size``, ``name``, ``weights_hash()`` and
        ``torch_features(x)`` (exported now if missing), checked against torch on a fixed input the first
        time this file is loaded (``checked_export``)."""
        from captioner.paths import subdir

        path = subdir("onnx") / f"{enc.name}-{enc.size}px-{enc.weights_hash()}-torch{torch_version()}.onnx"

        def reference():
            import torch

            x = np.random.default_rng(0).standard_normal((2, 3, enc.size, enc.size)).astype(np.float32)
            return {"x": x}, enc.torch_features(torch.from_numpy(x)).float().cpu().numpy()

        return checked_export(cls, path, lambda: export_onnx(enc.model, enc.size, path),
                              reference if check else None, enc.name)


def onnx_or_none(enc, lock, load):
    """``enc._ort``, loaded once by ``load()``; None where ``enc.backend`` is torch, the device is not the CPU
    or loading failed (then ``enc._ort`` is False, the reason logged once; raised when the backend is onnx)."""
    if enc.backend == "torch" or enc.device != "cpu" or enc._ort is False:
        return None
    with lock:
        if enc._ort is None:
            try:
                enc._ort = load()
            except Exception as e:  # noqa: BLE001 - any failure: the torch path still works
                if enc.backend == "onnx":
                    from captioner.errors import CaptionerError

                    raise CaptionerError(f"{enc.name}: the onnx backend is unavailable ({e})") from None
                log.warning("%s: onnxruntime unavailable (%s); running in torch", enc.name, e)
                enc._ort = False
    return enc._ort or None


def torch_version() -> str:
    """The installed torch version, as a file-name part, without importing torch (~1.8 s)."""
    from importlib.metadata import version

    return re.sub(r"[^A-Za-z0-9.]+", "_", version("torch"))


def checked_export(cls, path: Path, export, reference, name: str, rtol: float = CHECK_RTOL):
    """``cls(path)``, exporting first (``export()``) if the file is missing, and checked against torch:
    ``reference()`` gives (feeds, expected first output); the check runs the first time a file is loaded
    and its result is kept beside it (``<file>.check.json``, with the hash of the file it checked), so later
    loads need no torch. A failed check raises (the caller falls back to torch)."""
    import json

    from captioner.artifacts import key_lock
    from captioner.encoders.base import hash_files
    from captioner.paths import atomic_write_json

    with key_lock(path, what=f"the ONNX export {path.name}"):  # one process exports, the others load it
        if not path.exists():
            log.info("exporting %s to %s", name, path)
            export()
    m = cls(path)
    if reference is None:
        return m
    side = path.with_suffix(".check.json")
    digest = hash_files([path])
    try:
        done = json.loads(side.read_text())
        if done.get("onnx_hash") == digest and done.get("error", 1.0) < rtol:
            m.check_error = done["error"]
            return m
    except (OSError, ValueError):
        pass
    feeds, ref = reference()
    got = m.session().run(None, feeds)[0]
    err = float(np.abs(got - ref).max() / max(1e-12, float(np.abs(ref).max()))) if got.shape == ref.shape \
        else float("inf")
    if not err < rtol:
        raise RuntimeError(f"onnx export of {name} differs from torch (relative error {err:.1e}, shapes "
                           f"{got.shape} vs {ref.shape}); delete {path} to export again")
    m.check_error = err
    atomic_write_json(side, {"onnx_hash": digest, "error": err, "name": name})
    return m
