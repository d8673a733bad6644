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
def _without_onnx_package():
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
        with warnings.catch_warnings(), _without_onnx_package(), torch.no_grad():
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
        import sys

        torch = sys.modules.get("torch")
        return max(1, int(torch.get_num_threads())) if torch is not None else 1

    def session(self, threads: int | None = None):
        import onnxruntime as ort

        n = threads or self.threads()
        with self._lock:
            if n not in self._sessions:
                so = ort.SessionOptions()
                so.intra_op_num_threads = n
                so.inter_op_num_threads = 1
                so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                # a shared machine: idle workers must sleep, not spin on the cores others need
                so.add_session_config_entry("session.intra_op.allow_spinning", "0")
                so.log_severity_level = 3
                self._sessions[n] = ort.InferenceSession(self._bytes, so, providers=["CPUExecutionProvider"])
            return self._sessions[n]

    def __call__(self, a: np.ndarray) -> np.ndarray:
        a = np.ascontiguousarray(a, dtype=np.float32)
        return self.session().run(None, {"x": a})[0]

    @classmethod
    def for_encoder(cls, enc, check: bool = True) -> "OnnxModel":
        """The cached export for an image encoder with ``model``, ``size``, ``name``, ``weights_hash()`` and
        ``torch_features(x)`` (exported now if missing), checked against torch on a fixed input."""
        import torch

        from captioner.paths import subdir

        tv = re.sub(r"[^A-Za-z0-9.]+", "_", torch.__version__)
        path = subdir("onnx") / f"{enc.name}-{enc.size}px-{enc.weights_hash()}-torch{tv}.onnx"
        if not path.exists():
            log.info("exporting %s to %s", enc.name, path)
            export_onnx(enc.model, enc.size, path)
        m = cls(path)
        if check:
            x = np.random.default_rng(0).standard_normal((2, 3, enc.size, enc.size)).astype(np.float32)
            ref = enc.torch_features(torch.from_numpy(x)).float().cpu().numpy()
            got = m(x)
            err = float(np.abs(got - ref).max() / max(1e-12, float(np.abs(ref).max())))
            if got.shape != ref.shape or not err < CHECK_RTOL:
                raise RuntimeError(f"onnx export of {enc.name} differs from torch (relative error {err:.1e}, "
                                   f"shapes {got.shape} vs {ref.shape}); delete {path} to export again")
            m.check_error = err
        return m
