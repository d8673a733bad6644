"""all-MiniLM-L6-v2 through onnxruntime, tokenised by the ``tokenizers`` fast tokenizer (no transformers).

A warm CLI call that only needs the text encoder's fingerprint (the bank and the corpus come from the
cache) loads nothing; one that encodes text loads the ONNX export (made once per machine under
``$CAPTIONER_HOME/onnx`` from the torch model, checked against it the first time: cosine >= 1 - 1e-5)
instead of importing transformers (~2.5 s) and torch (~1.8 s). The fingerprint is the one the torch
encoder had, so every cached embedding stays valid; ``backend="torch"`` (or ``$CAPTIONER_TEXT_BACKEND``)
keeps the transformers path, which is also the fallback when onnxruntime is missing or the check fails.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from captioner.encoders.base import Encoder
from captioner.errors import CaptionerError

_LOCK = threading.Lock()


def fast_tokenizer(folder: str | Path, max_length: int = 128):
    """The model's ``tokenizer.json`` as a ``tokenizers.Tokenizer``: truncation at ``max_length``, padding
    to the longest in the batch (what ``AutoTokenizer(..., padding=True, truncation=True)`` does)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    tok.enable_truncation(max_length=max_length)
    pad = tok.token_to_id("[PAD]")
    tok.enable_padding(pad_id=0 if pad is None else pad, pad_token="[PAD]")
    return tok


def export_text_onnx(folder: str | Path, path: Path) -> Path:
    """Export the sentence encoder (mask-weighted mean of the last hidden states, L2-normalised) for
    (N, T) int64 input_ids / attention_mask / token_type_ids (N, T dynamic) to ``path``."""
    import io
    import warnings

    import torch
    from transformers import AutoModel

    from captioner.encoders.onnx_export import without_onnx_package
    from captioner.paths import atomic_write_bytes

    bert = AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()

    class Pooled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            h = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state  # (N, T, D)
            m = attention_mask.unsqueeze(-1).to(h.dtype)
            z = (h * m).sum(1) / m.sum(1).clamp(min=1)
            return torch.nn.functional.normalize(z, dim=-1)

    ids = torch.ones(2, 8, dtype=torch.long)
    buf = io.BytesIO()
    dyn = {"input_ids": {0: "n", 1: "t"}, "attention_mask": {0: "n", 1: "t"}, "token_type_ids": {0: "n", 1: "t"},
           "embedding": {0: "n"}}
    with warnings.catch_warnings(), without_onnx_package(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(Pooled().eval(), (ids, ids, torch.zeros_like(ids)), buf,
                          input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["embedding"],
                          dynamic_axes=dyn, opset_version=17, dynamo=False)
    atomic_write_bytes(path, buf.getvalue())
    return path


class _Session:
    """A minimal ``OnnxModel``-like holder (``session()``) for ``checked_export``."""

    def __init__(self, path: Path):
        import onnxruntime as ort

        from captioner.threads import ort_options

        self.path = Path(path)
        self._session = ort.InferenceSession(self.path.read_bytes(), ort_options(),
                                             providers=["CPUExecutionProvider"])

    def session(self):
        return self._session


CHECK_SENTENCES = ["A dog runs on the beach.", "Two red apples on a wooden table.",
                   "pluto — until recently, it was considered the 9th planet in our solar system."]


class MiniLML6(Encoder):
    """all-MiniLM-L6-v2 (contrastive sentence encoder trained on ~1B sentence pairs): mask-weighted mean
    pooling and L2 normalisation, 384-d, as sentence-transformers computes it. Loaded on first encode.

    ``backend``: "auto" (default; ``$CAPTIONER_TEXT_BACKEND``): onnxruntime when installed and the export
    checks, transformers otherwise; "onnx"; "torch"."""

    name = "minilm-l6"
    modality = "text"
    dim = 384
    pooling = "mean"

    def __init__(self, device: str = "cpu", max_length: int = 128, backend: str | None = None):
        from captioner.encoders.offline import minilm_l6_path

        self.path = str(minilm_l6_path())
        self.device, self.max_length, self.layer, self.normalize = device, max_length, -1, True
        backend = backend or os.environ.get("CAPTIONER_TEXT_BACKEND") or "auto"
        if backend not in ("auto", "onnx", "torch"):
            raise CaptionerError(f"text backend must be auto, onnx or torch, not {backend!r}")
        self.backend = "torch" if device != "cpu" else backend
        self._torch = None
        self._ort = None  # (session holder, tokenizer) once loaded; False once it failed

    def weights_hash(self):
        from captioner.encoders.hf import hash_weights_at

        return hash_weights_at(self.path)

    def extra_fingerprint(self):  # as HFTextEncoder's, so that cached embeddings stay valid
        return {"layer": -1, "normalize": True, "max_length": self.max_length}

    def torch_encoder(self):
        """The transformers encoder (the definition the ONNX export is checked against)."""
        if self._torch is None:
            from captioner.threads import configure

            configure()
            from captioner.encoders.hf import HFTextEncoder

            self._torch = HFTextEncoder(self.path, device=self.device, layer=-1, normalize=True,
                                        max_length=self.max_length, name=self.name)
        return self._torch

    def onnx_model(self):
        """(session holder, fast tokenizer), or None where the backend is torch or onnx failed (logged)."""
        from captioner.encoders.onnx_export import onnx_or_none

        return onnx_or_none(self, _LOCK, self._load_onnx)

    def _load_onnx(self):
        from captioner.encoders.onnx_export import checked_export, torch_version
        from captioner.paths import subdir

        path = subdir("onnx") / f"{self.name}-{self.weights_hash()}-torch{torch_version()}.onnx"
        tok = fast_tokenizer(self.path, self.max_length)

        def reference():
            return self._feeds(tok, CHECK_SENTENCES), self.torch_encoder().encode(CHECK_SENTENCES)

        # unit rows: a max |difference| of 1e-4 * max|x| keeps the cosine within 1e-6 of the torch one
        m = checked_export(_Session, path, lambda: export_text_onnx(self.path, path), reference, self.name)
        return m, tok

    @staticmethod
    def _feeds(tok, batch) -> dict:
        encs = tok.encode_batch(list(batch))
        return {"input_ids": np.asarray([e.ids for e in encs], np.int64),
                "attention_mask": np.asarray([e.attention_mask for e in encs], np.int64),
                "token_type_ids": np.asarray([e.type_ids for e in encs], np.int64)}

    def _encode(self, batch):
        ort = self.onnx_model()
        if ort is None:
            return self.torch_encoder()._encode(batch)
        m, tok = ort
        out = []
        for i in range(0, len(batch), 64):  # pads to the longest of 64, not of the whole list
            out.append(m.session().run(None, self._feeds(tok, batch[i:i + 64]))[0])
        return np.concatenate(out)


def load_minilm_l6(arg: str, device: str = "cpu", name: str | None = None, **kw) -> MiniLML6:
    """Registry loader of ``minilm-l6`` (``captioner.encoders.registry``)."""
    return MiniLML6(device=device, **kw)
