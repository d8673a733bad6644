"""The trained caption decoder served through onnxruntime: greedy decoding without importing torch.

Importing torch takes ~1.8 s, about a quarter of a second more than the rest of a warm ``captioner caption``
together. So a complete decoder checkpoint is exported once (``export_decoder``: the model's last-position
logits for (B, D) embeddings and (B, T) token ids, B and T dynamic) to ``$CAPTIONER_HOME/onnx``, checked
against torch on a fixed input, with a JSON sidecar holding its config, vocabulary, text-encoder
fingerprint and the hash of the checkpoint it came from. ``load_onnx_decoder`` returns it when the sidecar
matches the checkpoint (else None: the caller uses torch); the word pieces are turned back into text with
the ``tokenizers`` fast tokenizer. Greedy only: beam search stays in torch (``captioner.decoder``).
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np

from captioner.decoder import BOS, EOS, PAD, UNK, DecoderConfig, Vocab, detokenize, encoder_diff
from captioner.errors import CacheMismatchError, CaptionerError

FORMAT = 1


def onnx_path(checkpoint: str | Path) -> Path:
    from captioner.paths import subdir

    return subdir("onnx") / f"{Path(checkpoint).stem}.onnx"


def export_decoder(dec, checkpoint: str | Path) -> Path:
    """Export the torch ``Decoder`` ``dec`` (trained and saved at ``checkpoint``) and write its sidecar."""
    import io
    import warnings

    import torch

    from captioner.encoders.base import hash_files
    from captioner.encoders.onnx_export import CHECK_RTOL, without_onnx_package
    from captioner.paths import atomic_write_bytes, atomic_write_json

    class Last(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, emb, tokens):
            return self.m(emb, tokens)[:, -1]  # (B, V)

    path = onnx_path(checkpoint)
    mod = Last(dec.model.eval()).eval()
    emb = torch.nn.functional.normalize(torch.randn(2, dec.cfg.emb_dim, generator=torch.Generator().manual_seed(0)),
                                        dim=-1)
    tok = torch.tensor([[BOS, 5, 6], [BOS, 7, 8]], dtype=torch.long).clamp(max=dec.cfg.vocab_size - 1)
    buf = io.BytesIO()
    with warnings.catch_warnings(), without_onnx_package(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(mod, (emb, tok), buf, input_names=["emb", "tokens"], output_names=["logits"],
                          dynamic_axes={"emb": {0: "b"}, "tokens": {0: "b", 1: "t"}, "logits": {0: "b"}},
                          opset_version=17, dynamo=False)
        ref = mod(emb, tok).numpy()
    atomic_write_bytes(path, buf.getvalue())
    got = OnnxDecoder(path, dec.cfg, dec.vocab, dec.text_encoder).logits(emb.numpy(), tok.numpy())
    err = float(np.abs(got - ref).max() / max(1e-12, float(np.abs(ref).max())))
    if not err < CHECK_RTOL:
        path.unlink(missing_ok=True)
        raise RuntimeError(f"onnx export of the decoder differs from torch (relative error {err:.1e})")
    atomic_write_json(path.with_suffix(".json"), {
        "format": FORMAT, "checkpoint": Path(checkpoint).name, "checkpoint_hash": hash_files([checkpoint]),
        "onnx_hash": hash_files([path]), "check_error": err, "model_config": asdict(dec.cfg),
        "vocab": list(dec.vocab.bert_ids), "text_encoder": dict(dec.text_encoder), "meta": _jsonable(dec.meta)})
    return path


def _jsonable(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if k != "losses"}


def load_onnx_decoder(checkpoint: str | Path, text_encoder: dict) -> "OnnxDecoder | None":
    """The exported decoder of ``checkpoint`` when its sidecar matches the checkpoint and the ONNX file
    (hashes, memoised on size and mtime) and onnxruntime is installed; else None. A text encoder other
    than the one it was trained for raises CacheMismatchError, as ``load_decoder`` does."""
    import json

    from captioner.encoders.base import hash_files

    path = onnx_path(checkpoint)
    try:
        import onnxruntime  # noqa: F401

        side = json.loads(path.with_suffix(".json").read_text())
        if side.get("format") != FORMAT or side.get("checkpoint_hash") != hash_files([checkpoint]) \
                or side.get("onnx_hash") != hash_files([path]):
            return None
    except (ImportError, OSError, ValueError):
        return None
    diff = encoder_diff(side["text_encoder"], text_encoder)
    if diff:
        raise CacheMismatchError(f"{checkpoint}: decoder trained for text encoder {side['text_encoder'].get('name')!r}"
                                 f", not {text_encoder.get('name')!r}; retrain it for this encoder")
    return OnnxDecoder(path, DecoderConfig(**side["model_config"]), Vocab(side["vocab"]), side["text_encoder"],
                       meta=side.get("meta"))


class OnnxDecoder:
    """``generate(E) -> list[str]`` (greedy), as ``captioner.decoder.Decoder`` with ``beam=1``."""

    device = "cpu"

    def __init__(self, path: Path, cfg: DecoderConfig, vocab: Vocab, text_encoder: dict, meta: dict | None = None):
        import onnxruntime as ort

        from captioner.threads import ort_options

        self.path, self.cfg, self.vocab, self.text_encoder = Path(path), cfg, vocab, text_encoder
        self.meta = dict(meta or {})
        self.session = ort.InferenceSession(self.path.read_bytes(), ort_options(),
                                            providers=["CPUExecutionProvider"])
        self._tok = None

    def logits(self, emb: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        return self.session.run(None, {"emb": np.ascontiguousarray(emb, np.float32),
                                       "tokens": np.ascontiguousarray(tokens, np.int64)})[0]

    def generate(self, E: np.ndarray, beam: int = 1, max_len: int | None = None, **_) -> list[str]:
        if beam > 1:
            raise CaptionerError("the onnx decoder decodes greedily; beam search needs the torch decoder")
        E = np.asarray(E, np.float32)
        if E.ndim != 2 or E.shape[1] != self.cfg.emb_dim:
            raise CaptionerError(f"decoder expects (N, {self.cfg.emb_dim}) embeddings, got {E.shape}")
        emb = E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-8)
        max_len = min(max_len or self.cfg.max_len, self.cfg.max_len)
        seq = np.full((len(E), 1), BOS, np.int64)
        done = np.zeros(len(E), bool)
        for t in range(max_len - 1):
            lg = self.logits(emb, seq)
            lg[:, [PAD, BOS, UNK]] = -np.inf
            if t == 0:
                lg[:, EOS] = -np.inf
            nxt = np.where(done, EOS, lg.argmax(-1))
            seq = np.concatenate([seq, nxt[:, None]], 1)
            done |= nxt == EOS
            if done.all():
                break
        return [self.decode(s[1:]) for s in seq]

    def decode(self, local_ids) -> str:
        """Local ids -> text (up to EOS), through the fast tokenizer."""
        if self._tok is None:
            from captioner.encoders.offline import minilm_l6_path
            from captioner.encoders.text_onnx import fast_tokenizer

            self._tok = fast_tokenizer(minilm_l6_path())
        bert = []
        for i in local_ids:
            if int(i) == EOS:
                break
            if int(i) >= 4:
                bert.append(self.vocab.bert_ids[int(i) - 4])
        return detokenize(self._tok.decode(bert, skip_special_tokens=True))
