"""JEPA models: a transformer text encoder, a small image encoder (CNN or ViT), a predictor MLP, and the
collapse-preventing regularisers (SIGReg, VICReg, InfoNCE). Also the next-token-prediction baseline with
the same backbone (a causal mask and a tied LM head): a JEPA whose "views" are parts of one document.

Everything here is plain torch; the configs are dataclasses that live in the checkpoint, so a model
rebuilds itself from what it saved (``build_model(config)``).
"""
from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from captioner.jepa.losses import (  # noqa: F401  (re-exported: the training loop and tests read them here)
    cov_reg,
    epps_pulley,
    expected_ep_gaussian,
    info_nce,
    sigreg,
    vicreg_reg,
)

KINDS = ("text-jepa", "ntp", "image-jepa")


# --------------------------------------------------------------------------------------------- configs
@dataclass
class TextConfig:
    vocab_size: int = 30522        # the all-MiniLM-L6-v2 (uncased BERT) vocabulary
    dim: int = 64
    layers: int = 2
    heads: int = 4
    mlp_ratio: int = 4
    max_len: int = 32              # tokens per view (JEPA) or per window (NTP), specials included
    dropout: float = 0.0
    embed_dim: int = 64            # JEPA representation (projector output); NTP embeds with `dim`
    proj_hidden: int = 256         # JEPA projector: Linear -> BatchNorm -> GELU -> Linear


@dataclass
class ImageConfig:
    arch: str = "cnn"              # "cnn" | "vit"
    image_size: int = 32
    channels: list = field(default_factory=lambda: [32, 64, 128])   # cnn: one stride-2 stage each
    pool: str = "mean"             # cnn: "mean" (global average) | "flatten" (keeps where things are) | both
                                   # ("mean+flatten") | "mean+coords" (the average and each channel's soft-argmax)
    norm: str = "batch"            # cnn: "batch" | "group" (per-image: erases absolute levels, e.g. colour)
    patch: int = 4                 # vit
    dim: int = 64                  # vit width
    layers: int = 2                # vit
    heads: int = 4                 # vit
    embed_dim: int = 64
    proj_hidden: int = 256


@dataclass
class ObjectiveConfig:
    reg: str = "sigreg"            # "sigreg" | "vicreg" | "cov" (covariance = I, mean = 0) | "infonce"
    reg_weight: float = 0.05       # loss = (1 - w) * prediction + w * regulariser (sigreg, vicreg)
    reg_weight_end: float | None = None   # w moves linearly from reg_weight to this over training (None: fixed)
    target: str = "stopgrad"       # "stopgrad" | "ema" | "none" (gradients through both views: VICReg's own setting)
    ema: float = 0.996
    pred_hidden: int = 128         # 0: a linear predictor
    sigreg_slices: int = 256
    sigreg_knots: int = 17
    sigreg_tmax: float = 3.0
    temperature: float = 0.1       # infonce


def config_dict(obj) -> dict:
    return asdict(obj)


# ------------------------------------------------------------------------------------------- backbones
class Block(nn.Module):
    """Pre-LayerNorm transformer block (attention through scaled_dot_product_attention)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int = 4, dropout: float = 0.0):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))
        self.drop = nn.Dropout(dropout)
        self.p = dropout

    def forward(self, x, attn_mask=None, causal=False):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal,
                                           dropout_p=self.p if self.training else 0.0)  # (B, H, T, d/H)
        x = x + self.drop(self.out(a.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.mlp(self.ln2(x)))


class TextBackbone(nn.Module):
    """Token + learned position embeddings, ``layers`` blocks, a final LayerNorm. (B, T) -> (B, T, D)."""

    def __init__(self, cfg: TextConfig, causal: bool = False):
        super().__init__()
        self.cfg, self.causal = cfg, causal
        self.tok = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.pos = nn.Embedding(cfg.max_len, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg.dim, cfg.heads, cfg.mlp_ratio, cfg.dropout) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.dim)
        self.apply(_init)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))   # (B, T, D)
        attn = None
        if mask is not None and not self.causal:
            attn = mask[:, None, None, :].bool()                             # (B, 1, 1, T): keys to attend
        for blk in self.blocks:
            # right padding + causal: a real token never sees a pad, so no extra mask is needed
            x = blk(x, attn_mask=attn, causal=self.causal)
        return self.ln(x)


def masked_mean(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T, D), (B, T) -> (B, D): mean over the real tokens."""
    m = mask.to(h.dtype).unsqueeze(-1)
    return (h * m).sum(1) / m.sum(1).clamp_min(1.0)


class CNNBackbone(nn.Module):
    """Stride-2 conv stages (conv-norm-GELU x2 each), then a global average pool (B, C), the
    flattened final map (B, C * H' * W') or both concatenated. (B, 3, H, W) -> (B, out_dim)."""

    def __init__(self, cfg: ImageConfig):
        super().__init__()
        layers, c_in = [], 3
        if cfg.norm not in ("batch", "group"):
            raise ValueError(f"cnn norm must be 'batch' or 'group', not {cfg.norm!r}")

        def norm(c):
            return nn.BatchNorm2d(c) if cfg.norm == "batch" else nn.GroupNorm(min(8, c), c)

        for c in cfg.channels:
            layers += [nn.Conv2d(c_in, c, 3, stride=2, padding=1), norm(c), nn.GELU(),
                       nn.Conv2d(c, c, 3, padding=1), norm(c), nn.GELU()]
            c_in = c
        self.net = nn.Sequential(*layers)
        self.pool = cfg.pool
        side = cfg.image_size // 2 ** len(cfg.channels)
        dims = {"mean": c_in, "flatten": c_in * side * side, "mean+flatten": c_in * (1 + side * side),
                "mean+coords": 3 * c_in}
        if cfg.pool not in dims:
            raise ValueError(f"cnn pool must be one of {', '.join(dims)}, not {cfg.pool!r}")
        self.out_dim = dims[cfg.pool]
        if cfg.pool == "mean+coords":
            # spatial soft-argmax (each channel's expected x and y under a softmax over the map), with a
            # learnt sharpness per channel; the grid runs over [-1, 1] through the cell centres
            self.log_sharp = nn.Parameter(torch.zeros(c_in))
            g = (torch.arange(side, dtype=torch.float32) + 0.5) / side * 2 - 1
            self.register_buffer("grid_x", g.repeat(side), persistent=False)           # (H'W',) x of each cell
            self.register_buffer("grid_y", g.repeat_interleave(side), persistent=False)

    def forward(self, x):
        h = self.net(x)                                               # (B, C, H', W')
        if self.pool == "mean":
            return h.mean((2, 3))
        if self.pool == "flatten":
            return h.flatten(1)
        if self.pool == "mean+coords":
            # what is there (the average) and where each channel fires (its soft-argmax): position as two
            # numbers per channel, the same whatever the colour, rather than one weight per cell
            w = torch.softmax(h.flatten(2) * self.log_sharp.exp()[:, None], -1)       # (B, C, H'W')
            return torch.cat([h.mean((2, 3)), w @ self.grid_x, w @ self.grid_y], 1)
        # what is there (translation-invariant) and where it is
        return torch.cat([h.mean((2, 3)), h.flatten(1)], 1)


class ViTBackbone(nn.Module):
    """Patch embedding + transformer blocks + mean pool. (B, 3, H, W) -> (B, D)."""

    def __init__(self, cfg: ImageConfig):
        super().__init__()
        n = (cfg.image_size // cfg.patch) ** 2
        self.patch = nn.Conv2d(3, cfg.dim, cfg.patch, stride=cfg.patch)
        self.pos = nn.Parameter(torch.randn(1, n, cfg.dim) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg.dim, cfg.heads) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.dim)
        self.out_dim = cfg.dim
        self.apply(_init)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos       # (B, N, D)
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x).mean(1)


def _init(m):
    if isinstance(m, (nn.Linear, nn.Embedding)):
        nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)


def projector(d_in: int, hidden: int, d_out: int) -> nn.Module:
    """Pooled backbone features -> representation. The BatchNorm matters: pooled transformer features
    share one large common direction, and without a per-feature standardisation the optimiser takes
    hundreds of steps to amplify the small directions that tell scenes apart (SIGReg stalls near 7
    where a batchnormed projector reaches ~1 in 100 steps on the scene lab)."""
    return nn.Sequential(nn.Linear(d_in, hidden), nn.BatchNorm1d(hidden), nn.GELU(), nn.Linear(hidden, d_out))


def predictor(dim: int, hidden: int) -> nn.Module:
    """The JEPA predictor: an MLP with one ``hidden`` layer, or (``hidden`` = 0) a single linear map."""
    if hidden == 0:
        return nn.Linear(dim, dim)
    return nn.Sequential(nn.Linear(dim, hidden), nn.LayerNorm(hidden), nn.GELU(), nn.Linear(hidden, dim))


# ------------------------------------------------------------------------------------------------ JEPAs
class JEPA(nn.Module):
    """Two views of one scene; the predictor maps view A's embedding to view B's (stop-grad or EMA target)
    embedding and back, and a regulariser keeps the embeddings from collapsing.

    Subclasses provide ``encoder`` (backbone + projector) via ``embed(view) -> (B, E)``.
    """

    kind = "?"

    def __init__(self, embed_dim: int, obj: ObjectiveConfig):
        super().__init__()
        self.obj = obj
        self.pred = predictor(embed_dim, obj.pred_hidden)
        self.target = None  # built by enable_ema() once the encoder exists
        self.progress = 0.0  # fraction of training done (set by the training loop; drives reg_weight_end)

    def _make_target(self):
        if self.obj.target == "ema":
            self.target = copy.deepcopy(self.encoder)
            for p in self.target.parameters():
                p.requires_grad_(False)
        elif self.obj.target not in ("stopgrad", "none"):
            raise ValueError(f"target must be 'stopgrad', 'ema' or 'none', not {self.obj.target!r}")

    @torch.no_grad()
    def update_target(self):
        if self.target is not None:
            m = self.obj.ema
            for pt, po in zip(self.target.parameters(), self.encoder.parameters()):
                pt.mul_(m).add_(po.detach(), alpha=1 - m)

    def embed(self, *view) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _target_embed(self, *view):
        if self.target is None:
            return self.embed(*view) if self.obj.target == "none" else self.embed(*view).detach()
        with torch.no_grad():
            return self._run(self.target, *view)

    def forward(self, view_a: tuple, view_b: tuple, generator: torch.Generator | None = None) -> dict:
        """Loss on a batch of view pairs. Returns {"loss", "pred", "reg"} (scalars; "pred"/"reg" detached)."""
        from captioner.distributed import gather_rows

        o = self.obj
        za, zb = self.embed(*view_a), self.embed(*view_b)                     # (B, E)
        pa, pb = self.pred(za), self.pred(zb)
        # Batch-level terms see the global batch under several processes (this process's rows otherwise):
        # their mean over processes then equals, with its gradient, the one-process loss.
        if o.reg == "infonce":
            ta, tb = (za, zb) if self.target is None else (self._target_embed(*view_a), self._target_embed(*view_b))
            (ta, off), (tb, _) = gather_rows(ta), gather_rows(tb)
            pred = (info_nce(pa, tb, o.temperature, off) + info_nce(pb, ta, o.temperature, off)) / 2
            return {"loss": pred, "pred": pred.detach(), "reg": torch.zeros(())}
        if self.target is not None:
            ta, tb = self._target_embed(*view_a), self._target_embed(*view_b)
        elif o.target == "none":
            ta, tb = za, zb
        else:
            ta, tb = za.detach(), zb.detach()
        pred = (F.mse_loss(pa.float(), tb.float()) + F.mse_loss(pb.float(), ta.float())) / 2
        za, zb = gather_rows(za)[0], gather_rows(zb)[0]
        if o.reg == "sigreg":
            reg = (sigreg(za, o.sigreg_slices, o.sigreg_knots, o.sigreg_tmax, generator)
                   + sigreg(zb, o.sigreg_slices, o.sigreg_knots, o.sigreg_tmax, generator)) / 2
        elif o.reg == "vicreg":
            reg = vicreg_reg(za, zb)
        elif o.reg == "cov":
            reg = cov_reg(za, zb)
        else:
            raise ValueError(f"unknown regulariser {o.reg!r}; choose sigreg, vicreg, cov or infonce")
        w = o.reg_weight if o.reg_weight_end is None else o.reg_weight + (o.reg_weight_end - o.reg_weight) * self.progress
        return {"loss": (1 - w) * pred + w * reg, "pred": pred.detach(), "reg": reg.detach()}


class TextEncoderHead(nn.Module):
    def __init__(self, cfg: TextConfig):
        super().__init__()
        self.backbone = TextBackbone(cfg, causal=False)
        self.proj = projector(cfg.dim, cfg.proj_hidden, cfg.embed_dim)

    def forward(self, ids, mask):
        return self.proj(masked_mean(self.backbone(ids, mask), mask))           # (B, E)


class TextJEPA(JEPA):
    kind = "text-jepa"

    def __init__(self, text: TextConfig, obj: ObjectiveConfig):
        super().__init__(text.embed_dim, obj)
        self.cfg = text
        self.encoder = TextEncoderHead(text)
        self._make_target()

    @staticmethod
    def _run(enc, ids, mask):
        return enc(ids, mask)

    def embed(self, ids, mask):
        """(B, T) token ids + (B, T) mask -> (B, E) representation (mean-pooled, projected)."""
        return self.encoder(ids, mask)


class ImageEncoderHead(nn.Module):
    def __init__(self, cfg: ImageConfig):
        super().__init__()
        if cfg.arch == "cnn":
            self.backbone = CNNBackbone(cfg)
        elif cfg.arch == "vit":
            self.backbone = ViTBackbone(cfg)
        else:
            raise ValueError(f"image arch must be 'cnn' or 'vit', not {cfg.arch!r}")
        self.proj = projector(self.backbone.out_dim, cfg.proj_hidden, cfg.embed_dim)

    def forward(self, x):
        return self.proj(self.backbone((x - 0.5) / 0.25))                      # (B, E); x in [0, 1]


class ImageJEPA(JEPA):
    kind = "image-jepa"

    def __init__(self, image: ImageConfig, obj: ObjectiveConfig):
        super().__init__(image.embed_dim, obj)
        self.cfg = image
        self.encoder = ImageEncoderHead(image)
        self._make_target()

    @staticmethod
    def _run(enc, x):
        return enc(x)

    def embed(self, x):
        """(B, 3, H, W) floats in [0, 1] -> (B, E)."""
        return self.encoder(x)


class NextTokenLM(nn.Module):
    """The bad-views baseline: the text backbone with a causal mask and an LM head tied to the token
    embeddings; embedded by mean-pooled final hidden states (or the last token's, ``embed(pool="last")``)."""

    kind = "ntp"

    def __init__(self, text: TextConfig):
        super().__init__()
        self.cfg = text
        self.backbone = TextBackbone(text, causal=True)
        self.vocab = None     # (V',) ids the softmax runs over during training; None = the whole vocabulary
        self.remap = None     # (V,) id -> position in `vocab`

    def restrict_vocab(self, ids) -> None:
        """Train the softmax over the token ids that occur in the corpus only (non-persistent: not saved).

        Exactly the LM whose vocabulary is the corpus's; for the scene lab (~100 distinct tokens of 30522)
        it removes almost all of the LM head's cost. The embeddings it produces are unaffected."""
        ids = torch.as_tensor(sorted(set(int(i) for i in ids)), dtype=torch.long)
        remap = torch.full((self.cfg.vocab_size,), -100, dtype=torch.long)
        remap[ids] = torch.arange(len(ids))
        dev = self.backbone.tok.weight.device
        self.vocab, self.remap = ids.to(dev), remap.to(dev)

    POOLS = ("mean", "last")

    def embed(self, ids, mask, pool: str = "mean"):
        """(B, T) ids + mask (right-padded) -> (B, D) final hidden states pooled over the real tokens:
        ``mean`` (the default, as LLM features are usually read) or ``last``, the state at the last real
        token (the closing [SEP]: having read the whole text, where the LM starts predicting the next
        text of the same document)."""
        h = self.backbone(ids, mask)
        if pool == "mean":
            return masked_mean(h, mask)
        if pool == "last":
            last = mask.long().sum(1).clamp_min(1) - 1
            return h[torch.arange(h.shape[0], device=h.device), last]
        raise ValueError(f"unknown NTP pooling {pool!r}; choose one of {', '.join(self.POOLS)}")

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, generator=None) -> dict:
        h = self.backbone(ids, mask)                                          # (B, T, D)
        tgt = ids[:, 1:]
        w = self.backbone.tok.weight
        if self.vocab is not None:
            if self.vocab.device != w.device:
                self.vocab, self.remap = self.vocab.to(w.device), self.remap.to(w.device)
            w, tgt = w[self.vocab], self.remap[tgt]
        logits = h[:, :-1] @ w.T                                              # (B, T-1, V)
        tgt = tgt.masked_fill(~mask[:, 1:].bool(), -100)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100)
        return {"loss": loss, "pred": loss.detach(), "reg": torch.zeros(())}


def build_model(kind: str, text: TextConfig | None = None, image: ImageConfig | None = None,
                obj: ObjectiveConfig | None = None) -> nn.Module:
    """The model for ``kind`` in KINDS from its configs (what a checkpoint stores)."""
    obj = obj or ObjectiveConfig()
    if kind == "text-jepa":
        return TextJEPA(text or TextConfig(), obj)
    if kind == "ntp":
        return NextTokenLM(text or TextConfig())
    if kind == "image-jepa":
        return ImageJEPA(image or ImageConfig(), obj)
    raise ValueError(f"unknown model kind {kind!r}; choose one of {', '.join(KINDS)}")


def count_params(model: nn.Module, trainable_only: bool = True) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
