"""Hugging Face encoders by hub name or local path: vision models (DINOv2, CLIP vision tower, ViT, ...)
and text models (sentence encoders with mean pooling; causal LMs with mean-pooled hidden states of a
chosen layer, as in the Platonic Representation Hypothesis code)."""
from __future__ import annotations

import glob
import os
from pathlib import Path

from captioner.encoders.base import IMAGENET_MEAN, IMAGENET_STD, Encoder, hash_files, preprocess_batch
from captioner.errors import CaptionerError

CAUSAL_TYPES = {"llama", "gpt2", "qwen2", "qwen3", "mistral", "gemma", "gemma2", "gemma3", "phi", "phi3",
                "gpt_neox", "opt", "bloom", "falcon", "olmo", "olmo2", "smollm3"}


def hash_weights_at(path: str) -> str:
    files = [f for pat in ("*.safetensors", "*.bin", "*.gguf", "*.onnx") for f in glob.glob(os.path.join(path, pat))]
    return hash_files(files) if files else "unhashed:" + os.path.basename(os.path.normpath(path))


def _quiet_transformers():
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _resolve(name_or_path: str) -> str:
    """A local folder as is; a hub id through the local HF cache only (no network here)."""
    _quiet_transformers()
    if os.path.isdir(name_or_path):
        return name_or_path
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(name_or_path, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - any hub failure means the same thing to the user
        raise CaptionerError(
            f"cannot find {name_or_path!r} locally ({type(e).__name__}); this machine has no hub access: "
            "pass a local folder written by save_pretrained, or pre-fill the HF cache") from None


class HFImageEncoder(Encoder):
    """Any ``transformers`` vision backbone. ``pooling``: "cls" (first token, or pooler output for CNNs),
    "mean" (mean over patch tokens), or "proj" (CLIP's projected image embedding)."""

    modality = "image"

    def __init__(self, name_or_path: str, device: str = "cpu", pooling: str = "cls", resize: str = "crop",
                 dtype: str = "float32", name: str | None = None):
        import torch
        from transformers import AutoConfig, AutoModel

        self.path = _resolve(name_or_path)
        self.name = name or f"hf-image:{name_or_path}"
        self.device, self.pooling, self.resize = device, pooling, resize
        config = AutoConfig.from_pretrained(self.path)
        model = AutoModel.from_pretrained(self.path, dtype=getattr(torch, dtype))
        self.full = model
        # CLIP-like models hold a text tower too: keep the vision part.
        self.model = getattr(model, "vision_model", model).to(device).eval()
        vcfg = getattr(config, "vision_config", config)
        self.size = int(getattr(vcfg, "image_size", 224) or 224)
        if isinstance(self.size, (list, tuple)):
            self.size = int(self.size[0])
        self.mean, self.std = IMAGENET_MEAN, IMAGENET_STD
        try:
            from transformers import AutoImageProcessor

            proc = AutoImageProcessor.from_pretrained(self.path)
            self.mean = tuple(proc.image_mean)
            self.std = tuple(proc.image_std)
            crop = getattr(proc, "crop_size", None) or getattr(proc, "size", None)
            if isinstance(crop, dict):
                self.size = int(crop.get("height") or crop.get("shortest_edge") or self.size)
        except (OSError, ValueError, TypeError, AttributeError):
            pass  # no preprocessor config saved: ImageNet statistics at the config's size
        if pooling == "proj":
            if not hasattr(model, "get_image_features"):
                raise CaptionerError(f"{self.name}: pooling 'proj' needs a CLIP-like model with get_image_features")
            self.dim = int(model.config.projection_dim)
        else:
            self.dim = int(getattr(vcfg, "hidden_size", None) or getattr(vcfg, "hidden_sizes", [0])[-1])
        self.dtype = getattr(torch, dtype)

    def weights_hash(self):
        return hash_weights_at(self.path)

    def extra_fingerprint(self):
        return {"size": self.size, "resize": self.resize}

    def _encode(self, batch):
        import torch

        x = torch.from_numpy(preprocess_batch(batch, size=self.size, mean=self.mean, std=self.std,
                                              resize=self.resize)).to(self.device, self.dtype)  # (B, 3, H, W)
        with torch.inference_mode():
            if self.pooling == "proj":
                out = self.full.get_image_features(pixel_values=x)
                z = getattr(out, "pooler_output", out)
            else:
                out = self.model(pixel_values=x)
                h = out.last_hidden_state
                if h.dim() == 4:  # CNN backbones: (B, C, H, W)
                    z = h.mean((2, 3))
                elif self.pooling == "cls":
                    z = h[:, 0]  # (B, D)
                elif self.pooling == "mean":
                    z = h[:, 1:].mean(1)
                else:
                    raise CaptionerError(f"unknown pooling {self.pooling!r} (cls, mean, proj)")
        return z.float().cpu().numpy()


class HFTextEncoder(Encoder):
    """Any ``transformers`` text model: mask-weighted mean of the hidden states of ``layer`` (default: last).

    Sentence encoders use ``normalize=True`` (as sentence-transformers does); for causal LMs the
    Platonic Representation Hypothesis code mean-pools a chosen layer, which ``layer`` selects."""

    modality = "text"

    def __init__(self, name_or_path: str, device: str = "cpu", layer: int = -1, normalize: bool = False,
                 max_length: int = 128, dtype: str = "float32", name: str | None = None, tokenizer=None):
        import torch
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        self.path = _resolve(str(name_or_path))
        self.name = name or f"hf-text:{name_or_path}"
        self.device, self.layer, self.normalize, self.max_length = device, int(layer), normalize, max_length
        config = AutoConfig.from_pretrained(self.path)
        self.causal = config.model_type in CAUSAL_TYPES or any(
            a.endswith("ForCausalLM") for a in (config.architectures or []))
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(self.path)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token or self.tokenizer.unk_token
        self.model = AutoModel.from_pretrained(self.path, dtype=getattr(torch, dtype)).to(device).eval()
        self.dim = int(config.hidden_size)
        self.pooling = "mean" if layer == -1 else f"mean-layer{layer}"

    def weights_hash(self):
        return hash_weights_at(self.path)

    def extra_fingerprint(self):
        return {"layer": self.layer, "normalize": self.normalize, "max_length": self.max_length}

    def _encode(self, batch):
        import torch

        tok = self.tokenizer(batch, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        tok = {k: v.to(self.device) for k, v in tok.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        with torch.inference_mode():
            out = self.model(**tok, output_hidden_states=self.layer != -1)
            h = out.last_hidden_state if self.layer == -1 else out.hidden_states[self.layer]  # (B, T, D)
            m = tok["attention_mask"].unsqueeze(-1).to(h.dtype)  # (B, T, 1)
            z = (h * m).sum(1) / m.sum(1).clamp(min=1)
            if self.normalize:
                z = torch.nn.functional.normalize(z, dim=-1)
        return z.float().cpu().numpy()


def is_text_model(path: str) -> bool:
    """True when the folder holds a text model (has a tokenizer, no vision config)."""
    p = Path(path)
    return (p / "tokenizer_config.json").exists() or (p / "tokenizer.json").exists()


# registry loaders (``captioner.encoders.registry``): ``arg`` is the hub id or path after the prefix
def load_hf_image(arg: str, device: str = "cpu", name: str | None = None, **kw) -> HFImageEncoder:
    return HFImageEncoder(arg, device=device, name=name, **kw)


def load_hf_text(arg: str, device: str = "cpu", name: str | None = None, **kw) -> HFTextEncoder:
    return HFTextEncoder(arg, device=device, name=name, **kw)
