"""Every kind of rotation the captioner knows, defined once.

A rotation kind is a way to get a map from image-embedding space into text-embedding space: its name (what
the CLI, the pipeline, the report and the demo say), a label for tables, whether it reads any image-caption
pair, what it needs, and the function that fits it. The CLI choices, ``Pipeline.rotation``, ``captioner align
fit``, the zero-shot evaluation, the report and the demo all read :data:`KINDS`; adding a kind is one
:class:`RotationKind` entry plus its fit function.

A fit function takes a :class:`FitSource` (where the data comes from: the pipeline's train set and bank, or
two embedding caches) and the kind's options, and returns a :class:`Fitted` (the map and, for matchers, what
the matcher found). The options that change the fitted map are the kind's ``defaults`` updated with the
caller's; they go into the artifact's cache key.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

from captioner.errors import CaptionerError


class FitSource(Protocol):
    """What a fit function may read. Only the methods a kind uses are called (lazily)."""

    meta: dict  # recorded in the map: encoders' fingerprints, data it was fitted on

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(X (N, D_img), Y (N, D_txt)): image rows and the caption rows of the same samples."""

    def images(self) -> np.ndarray:
        """(N, D_img) unlabelled image rows."""

    def texts(self) -> np.ndarray:
        """(M, D_txt) caption rows with no link to the images (the caption bank)."""

    def image_encoder(self):
        """The image Encoder object (for the ``head`` kind)."""

    def text_encoder(self):
        """The text Encoder object (for the ``head`` kind)."""

    def log(self, msg: str) -> None:
        """Progress messages."""


@dataclass
class ArraySource:
    """A :class:`FitSource` from arrays already in memory; encoders given as objects or registry names."""

    meta: dict = field(default_factory=dict)
    X_pairs: np.ndarray | None = None
    Y_pairs: np.ndarray | None = None
    X: np.ndarray | None = None
    Y: np.ndarray | None = None
    image_enc: Any = None
    text_enc: Any = None

    def pairs(self):
        if self.X_pairs is None:
            raise CaptionerError("this rotation needs image-caption pairs, and none were given")
        return self.X_pairs, self.Y_pairs

    def images(self):
        return self.X if self.X is not None else self.pairs()[0]

    def texts(self):
        return self.Y if self.Y is not None else self.pairs()[1]

    def _get(self, enc):
        from captioner.encoders import get_encoder

        return get_encoder(enc) if isinstance(enc, str) else enc

    def image_encoder(self):
        return self._get(self.image_enc)

    def text_encoder(self):
        return self._get(self.text_enc)

    def log(self, msg: str) -> None:
        pass


class PipelineSource:
    """A pipeline's data as a ``captioner.rotations.FitSource``: its train pairs, train images and bank."""

    def __init__(self, pipe, fx: dict, fy: dict):
        self.pipe = pipe
        self.meta = {"x_encoder": fx, "y_encoder": fy, "train": f"{pipe.train_set.name}/{pipe.train_set.split}",
                     "bank_key": pipe.bank().key()}

    def pairs(self):
        return self.pipe.train_pairs()[:2]

    def images(self):
        return self.pipe.train_images()

    def texts(self):
        return self.pipe.bank().E

    def image_encoder(self):
        return self.pipe.encoder("image")

    def text_encoder(self):
        return self.pipe.encoder("text")

    def log(self, msg: str) -> None:
        self.pipe.log(msg)


@dataclass
class Fitted:
    """A fitted map and what its fit found beyond it (the matcher's result and the rows it saw)."""

    map: Any
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RotationKind:
    name: str
    label: str          # one line for tables and the demo
    pairing: str        # what links the two modalities, as the report says it
    uses_pairs: bool    # reads image-caption pairs
    public: bool        # offered to users (caption / classify / demo); the rest are references for evaluation
    fit: Callable[..., Fitted]
    defaults: dict = field(default_factory=dict)  # options that change the map (they go into cache keys)
    needs_head: bool = False  # needs an image encoder with a classifier head (captioner.encoders.heads)

    def options(self, **given) -> dict:
        """The kind's defaults updated with ``given`` (unknown names refused)."""
        bad = sorted(set(given) - set(self.defaults))
        if bad:
            raise CaptionerError(f"rotation {self.name!r} has no option {bad[0]!r}; its options: "
                                 f"{', '.join(sorted(self.defaults)) or 'none'}")
        return {**self.defaults, **given}


def _fit_paired(src: FitSource, scale: bool = False, dim: int | None = None, shared: str = "pca") -> Fitted:
    from alignment.procrustes import fit_procrustes

    X, Y = src.pairs()
    meta = {"pairing": f"{len(X)} image-caption pairs", **src.meta}
    return Fitted(fit_procrustes(X, Y, scale=scale, dim=dim, shared=shared, **meta))


def _fit_ridge(src: FitSource, alpha: float | None = None) -> Fitted:
    from alignment.procrustes import fit_ridge

    X, Y = src.pairs()
    meta = {"pairing": f"{len(X)} image-caption pairs", **src.meta}
    return Fitted(fit_ridge(X, Y, alpha=alpha, **meta))


def _fit_random(src: FitSource, seed: int = 0, dim: int | None = None) -> Fitted:
    from alignment.procrustes import fit_random

    meta = {"pairing": "none (random rotation between the PCA bases)", **src.meta}
    return Fitted(fit_random(src.images(), src.texts(), dim=dim, seed=seed, **meta))


def _fit_head(src: FitSource, temperature: float = 4.0, prompt: str = "a photo of a {c}.",
              text_mean: str = "bank", query_weight: float = 1.0) -> Fitted:
    """No image-caption pair: the image encoder's classifier head gives each unlabelled image a distribution
    over its class names; the text encoder embeds the names as ``prompt``; Procrustes from the images to
    those soft targets (``alignment.pseudo.fit_head_rotation``), centred on the bank's mean. With
    ``query_weight`` > 0 the map also adds the head's own class query in text space
    (``alignment.pseudo.with_head_query``; 1.0 chosen on the Tux Paint val split, docs/results/pairfree-real.md)."""
    from alignment.pseudo import fit_head_rotation, with_head_query
    from captioner.encoders.heads import classifier_head

    image_encoder, X = src.image_encoder(), np.asarray(src.images(), np.float32)
    W, b, names = classifier_head(image_encoder)
    src.log(f"embedding the {len(names)} class names of the {image_encoder.name} head")
    E = src.text_encoder().encode([prompt.format(c=n) for n in names])
    meta = {"pairing": f"none (pseudo-pairs: {len(X)} unlabelled images x the image encoder's {len(names)}-class "
                       f"head, class names embedded as '{prompt}')", **src.meta}
    mean = src.texts().mean(0) if text_mean == "bank" else None
    rot = fit_head_rotation(X, X @ W.T + b, E, temperature=temperature, text_mean=mean, **meta)
    return Fitted(with_head_query(rot, W, b, E, weight=query_weight) if query_weight > 0 else rot)


def _fit_pairfree(src: FitSource, max: int | None = None, seed: int = 0, matcher: str = "auto",
                  dim: int | None = None, scale: bool = False, progress: bool = False,
                  cards: str | None = None) -> Fitted:
    """Both clouds shuffled apart (no row order can leak pairs), at most ``max`` rows a side, then matched.
    ``cards`` (attribute cardinalities, "6,2,3,3,3") goes to the ``lattice`` matcher; without it the matcher
    estimates them from each cloud (``alignment.lattice.estimate_cards``)."""
    from alignment.maps import jsonable
    from alignment.pairfree import match

    X, Y = src.images(), src.texts()
    rng = np.random.default_rng(seed)
    xi = rng.permutation(len(X))[:max]
    yi = rng.permutation(len(Y))[:max]
    kw: dict = {}
    if matcher != "auto" or dim is not None or seed != 0 or progress:
        kw = {"method": matcher, "dim": dim, "seed": seed, "progress": progress}
    if scale and matcher == "ours":
        kw["fit_scale"] = True
    if cards is not None:
        if matcher != "lattice":
            raise CaptionerError(f"cards={cards!r} is an option of the lattice matcher, not of {matcher!r}")
        kw["cards"] = cards
    res = match(X[xi], Y[yi], **kw)
    m = res.rotation
    m.meta.update(src.meta)
    m.meta["pairing"] = f"none (pair-free match of {len(xi)} images to {len(yi)} captions, shuffled apart)"
    m.meta["pairfree"] = {"score": jsonable(res.score, max_array=64), "info": jsonable(res.info, max_array=64),
                          "matcher": res.info.get("auto", {}).get("chosen", matcher),
                          "n_images": int(len(xi)), "n_captions": int(len(yi))}
    return Fitted(m, {"result": res, "xi": xi, "yi": yi})


def _head_defaults() -> dict:
    from alignment.pseudo import DEFAULT_TEMPERATURE
    from captioner.encoders.heads import HEAD_PROMPT

    return {"temperature": DEFAULT_TEMPERATURE, "prompt": HEAD_PROMPT, "text_mean": "bank", "query_weight": 1.0}


KINDS: dict[str, RotationKind] = {k.name: k for k in [
    RotationKind("paired", "paired Procrustes (train pairs)", "train image-caption pairs", True, True,
                 _fit_paired, {"scale": False, "dim": None, "shared": "pca"}),
    RotationKind("pairfree", "pair-free match (no pairs)", "none (pair-free matcher)", False, True,
                 _fit_pairfree, {"max": 2000, "seed": 0, "matcher": "auto", "dim": None, "scale": False,
                                 "progress": False, "cards": None}),
    RotationKind("head", "pair-free, classifier-head pseudo-pairs (no pairs)",
                 "none (classifier-head pseudo-pairs)", False, True, _fit_head, _head_defaults(), needs_head=True),
    RotationKind("ridge", "ridge map (train pairs; least-squares reference)", "train image-caption pairs", True,
                 False, _fit_ridge, {"alpha": None}),
    RotationKind("random", "random rotation (floor)", "none (random rotation)", False, False, _fit_random,
                 {"seed": 0, "dim": None}),
]}

# Older names that still resolve (``captioner align fit --method procrustes``).
ALIASES = {"procrustes": "paired"}

PUBLIC = [k for k, v in KINDS.items() if v.public]
ALL = list(KINDS)


def get_kind(name: str) -> RotationKind:
    """The kind called ``name`` (or an alias of it), or a one-line error listing them."""
    kind = KINDS.get(ALIASES.get(name, name))
    if kind is None:
        raise CaptionerError(f"unknown rotation {name!r}; choose one of {', '.join(ALL)}")
    return kind


def label(name: str) -> str:
    """The table label of a kind; other names (``text``, ``cluster``) as they are."""
    kind = KINDS.get(ALIASES.get(name, name))
    return kind.label if kind else name


def key_params(name: str, **given) -> dict:
    """What besides the encoders and data a fitted map of this kind depends on (its cache key): the
    options that differ from the kind's defaults, plus those every map of the kind records, plus for
    ``pairfree`` the matcher's answer version (``alignment.pairfree.MATCHER_VERSION``)."""
    kind = get_kind(name)
    opts = kind.options(**given)
    out = {k: v for k, v in opts.items()
           if k in _KEYED.get(kind.name, ()) or (k not in _UNKEYED and v != kind.defaults[k])}
    if kind.name == "pairfree":  # a map fitted by an older matcher is refitted, not read stale
        from alignment.pairfree import MATCHER_VERSION

        out["matcher_version"] = MATCHER_VERSION
    return out


# The options that have always been part of each kind's cache key (so existing artifacts keep their names).
_KEYED = {"pairfree": ("max", "seed"), "random": ("seed",), "head": ("temperature", "prompt", "text_mean", "query_weight")}
_UNKEYED = {"progress"}  # options that do not change the map


__all__ = ["KINDS", "ALIASES", "PUBLIC", "ALL", "RotationKind", "FitSource", "ArraySource", "Fitted", "get_kind", "label",
           "key_params"]
