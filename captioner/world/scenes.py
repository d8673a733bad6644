"""The scene lab: a controlled world where the claim "JEPAs with good views learn the same representation
up to a rotation" can be checked end to end on a CPU.

A latent scene is one disc with five discrete attributes: colour (6), size (2), column (3), row (3) and
background (3): 324 scenes in all. Each modality *observes* a scene: a render (PIL, 32 px, small jitter in
position, size, shade and background) or a caption (templates with synonyms: "a big red disc on the
left at the top on a white background", "at the top, on the left, against a pale backdrop, there is
a large crimson dot"). Every observation, in either modality, independently misreports each attribute
with probability ``CORRUPT`` (it shows or names a random value instead), like a glimpse that gets a
detail wrong.

Why the corruption: two views of a scene then share each attribute with the same probability, so the
view kernel on latents factorises over attributes and its leading eigenspace is spanned by the
single-attribute indicators (``LATENT_DIM`` = 12 dimensions), identically for images and texts. A JEPA
whose embedding finds that eigenspace is, in either modality, the same representation up to a rotation:
the theorem's setting. Without it, two views would pin down the whole latent, every arrangement of the
324 scenes would be as good, and the two modalities could agree only by accident.

(Shapes were tried as an attribute and dropped: a 32-px CNN trained for minutes learns colour, size and
position but not shape, while the text JEPA learns all five, and the two spaces then differ by more than
a rotation for reasons unrelated to the views.)

Two renders of a scene are the image JEPA's views, two captions the text JEPA's; the next-token
baseline reads a scene's captions as one document. Held-out pairs are clean (uncorrupted) renders and
captions of all 324 scenes.
"""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

import numpy as np

NOUNS = ["circle", "disc", "dot", "round spot"]
COLOURS = {"red": ((215, 35, 35), ["red", "crimson"]), "orange": ((240, 130, 25), ["orange", "amber"]),
           "yellow": ((235, 205, 25), ["yellow", "golden"]), "green": ((35, 160, 55), ["green", "emerald"]),
           "blue": ((40, 75, 215), ["blue", "azure"]), "purple": ((135, 55, 175), ["purple", "violet"])}
SIZES = {"small": (0.13, ["small", "little", "tiny"]), "large": (0.24, ["large", "big", "huge"])}
COLS = {"left": (0.22, ["on the left", "at the left side", "to the left"]),
        "centre": (0.5, ["in the centre", "in the middle column", "at the horizontal centre"]),
        "right": (0.78, ["on the right", "at the right side", "to the right"])}
ROWS = {"top": (0.22, ["at the top", "near the top", "in the upper part"]),
        "middle": (0.5, ["halfway up", "at mid height", "in the middle row"]),
        "bottom": (0.78, ["at the bottom", "near the bottom", "in the lower part"])}
BACKGROUNDS = {"white": (238, ["on a white background", "against a pale backdrop"]),
               "grey": (140, ["on a grey background", "against a grey backdrop"]),
               "black": (30, ["on a black background", "against a dark backdrop"])}
ATTRS = {"colour": list(COLOURS), "size": list(SIZES), "col": list(COLS), "row": list(ROWS),
         "background": list(BACKGROUNDS)}
# attribute -> {value: (rendering parameter, [phrases that name it])}: the world's words, read and written
VALUE_WORDS = {"colour": COLOURS, "size": SIZES, "col": COLS, "row": ROWS, "background": BACKGROUNDS}
CORRUPT = 0.15         # probability that one observation misreports one attribute (both modalities)
LATENT_DIM = sum(len(v) - 1 for v in ATTRS.values())   # 12: the leading eigenspace of the view kernel
CARDS = ",".join(str(len(v)) for v in ATTRS.values())   # "6,2,3,3,3": the lattice matcher's cards

TEMPLATES = [
    "a {size} {colour} {noun} {col} {row} {bg}",
    "{row}, {col}, {bg}, there is a {size} {colour} {noun}",
    "{col} and {row} you can see a {colour} {noun} that is {size}, {bg}",
    "the picture shows a {size} {colour} {noun} {row} {col} {bg}",
    "{bg}, a {colour} {noun} {col}, {row}, and it is {size}",
    "a {noun}, {colour} and {size}, {row} {col} {bg}",
    "one {size} {noun} coloured {colour}, {col} {row}, {bg}",
]


@dataclass(frozen=True)
class Scene:
    colour: str
    size: str
    col: str
    row: str
    background: str

    def key(self) -> str:
        return f"{self.size}-{self.colour}-{self.row}-{self.col}-{self.background}"

    def to_dict(self) -> dict:
        return asdict(self)


def all_scenes() -> list[Scene]:
    """The 324 latent scenes, in a fixed order."""
    return [Scene(*t) for t in itertools.product(*ATTRS.values())]


def sample_scenes(n: int, seed: int = 0) -> list[Scene]:
    """``n`` scenes drawn uniformly (with repetition) from all of them."""
    rng = np.random.default_rng(seed)
    return [Scene(*(v[rng.integers(len(v))] for v in ATTRS.values())) for _ in range(n)]


def observe(scene: Scene, rng, corrupt: float = CORRUPT) -> Scene:
    """What one observation reports: each attribute replaced by a uniformly random value w.p. ``corrupt``."""
    vals = []
    for name, options in ATTRS.items():
        v = getattr(scene, name)
        if corrupt and rng.random() < corrupt:
            v = options[rng.integers(len(options))]
        vals.append(v)
    return Scene(*vals)


def describe(scene: Scene, seed: int = 0, corrupt: float = CORRUPT, omit: str | None = None) -> str:
    """One caption of ``scene`` (an observation: ``corrupt`` > 0 may misreport attributes); template and
    synonyms depend on ``seed``. ``omit``: an attribute (colour, size, col, row, background) the caption
    leaves out, as people leave out what they do not think worth saying (its phrase dropped from the
    template; ``read_caption`` then reads None for it)."""
    import re

    if omit is not None and omit not in ATTRS:
        raise ValueError(f"unknown attribute {omit!r} to omit; choose one of {', '.join(ATTRS)}")
    rng = np.random.default_rng(seed)
    o = observe(scene, rng, corrupt)
    words = {"noun": NOUNS, "colour": COLOURS[o.colour][1], "size": SIZES[o.size][1], "col": COLS[o.col][1],
             "row": ROWS[o.row][1], "bg": BACKGROUNDS[o.background][1]}
    t = TEMPLATES[rng.integers(len(TEMPLATES))]
    chosen = {k: v[rng.integers(len(v))] for k, v in words.items()}
    if omit is not None:
        chosen["bg" if omit == "background" else omit] = ""
    s = t.format(**chosen)
    if omit is not None:   # the template's words and punctuation around the dropped phrase
        s = re.sub(r"\s+", " ", s)
        s = re.sub(r"\b(and it is|that is|coloured)\s*(?=,|$)", "", s)
        s = re.sub(r"\band\s*(?=,|$)", "", s)
        s = re.sub(r",\s*and\b", ",", s) if s.startswith(("a noun", "a circle", "a disc", "a dot", "a round")) else s
        s = re.sub(r"\s+,", ",", s)
        s = re.sub(r",(\s*,)+", ",", s)
        s = re.sub(r"^\s*and\s+|\band (?=you can see)", "", s)
        s = re.sub(r"\s+", " ", s).strip(" ,")
    return s[0].upper() + s[1:] + "."


def read_caption(text: str) -> dict:
    """The scene a caption names, read with the world's own words: {attribute: value or None} for colour,
    size, col, row, background (the value whose phrase occurs first; None when no phrase of that attribute
    occurs). ``describe`` and every template round-trip: ``read_caption(describe(s, corrupt=0))`` is ``s``."""
    import re

    low = text.lower()
    out = {}
    for attr, table in VALUE_WORDS.items():
        hits = [(m.start(), v) for v, (_, phrases) in table.items() for p in phrases
                for m in [re.search(rf"\b{re.escape(p)}\b", low)] if m]   # whole words: "coloured" is not red
        out[attr] = min(hits)[1] if hits else None
    return out


def vocabulary() -> frozenset:
    """Every word (lower case, letters only) that a caption of the world can hold: its nouns, its templates'
    words and every value phrase. The world's text encoders saw no other word in training."""
    import re

    text = " ".join(NOUNS + TEMPLATES + [p for table in VALUE_WORDS.values() for _, ps in table.values() for p in ps])
    return frozenset(re.findall(r"[a-z]+", re.sub(r"\{[a-z]+\}", " ", text.lower())))


def unknown_words(texts) -> list[str]:
    """The words of ``texts`` outside the world's ``vocabulary``, in order of first appearance."""
    import re

    vocab, out = vocabulary(), []
    for t in texts:
        for w in re.findall(r"[a-z]+", str(t).lower()):
            if w not in vocab and w not in out:
                out.append(w)
    return out


def captions(scene: Scene, n: int, seed: int = 0, corrupt: float = CORRUPT, omit: float = 0.0) -> list[str]:
    """``n`` distinct captions (observations) of ``scene``. ``omit``: the probability that a caption leaves out
    one attribute (chosen uniformly; ``describe(omit=...)``), as a caption corpus written by people does; 0
    draws nothing more (the captions are those of before)."""
    if not 0.0 <= omit <= 1.0:
        raise ValueError(f"omit is a probability, got {omit}")
    names = list(ATTRS)
    out, k = [], 0
    while len(out) < n and k < 50 * n:
        left_out = None
        if omit:
            r = np.random.default_rng((seed * 100003 + k, 77))
            left_out = names[r.integers(len(names))] if r.random() < omit else None
        c = describe(scene, seed=seed * 100003 + k, corrupt=corrupt, omit=left_out)
        if c not in out:
            out.append(c)
        k += 1
    return out


def render(scene: Scene, size: int = 32, seed: int = 0, corrupt: float = CORRUPT, jitter: bool = True,
           supersample: int = 4):
    """One render of ``scene`` (an observation, see ``observe``) as an RGB PIL image ``size`` x ``size``;
    deterministic given ``seed``. Jitter: position +-5% of the side, size +-10%, shade +-15 per channel,
    background level +-10 and pixel noise."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    o = observe(scene, rng, corrupt)
    s = size * supersample

    def j(a):
        return rng.uniform(-a, a) if jitter else 0.0

    bg = int(BACKGROUNDS[o.background][0] + j(10))
    im = Image.new("RGB", (s, s), (bg, bg, bg))
    d = ImageDraw.Draw(im)
    cx = (COLS[o.col][0] + j(0.05)) * s
    cy = (ROWS[o.row][0] + j(0.05)) * s
    r = SIZES[o.size][0] * (1 + j(0.1)) * s
    col = tuple(int(np.clip(c + j(15), 0, 255)) for c in COLOURS[o.colour][0])
    d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=col)
    im = im.resize((size, size), Image.LANCZOS)
    if jitter:
        a = np.asarray(im, dtype=np.float32) + rng.normal(0, 3.0, (size, size, 3))
        im = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))
    return im


def scene_captions(n_scenes: int = 2000, seed: int = 0, n_captions: int = 6) -> tuple[list[list[str]], list[str]]:
    """``n_scenes`` random scenes, each with ``n_captions`` captions: (captions per scene, scene ids)."""
    scenes = sample_scenes(n_scenes, seed=seed)
    return ([captions(sc, n_captions, seed=seed * 7919 + i) for i, sc in enumerate(scenes)],
            [f"{i}:{sc.key()}" for i, sc in enumerate(scenes)])


def _render_seed(seed: int, i: int, r: int) -> int:
    return (seed * 1000003 + i) * 31 + r


def render_array(scenes: list[Scene], renders: int, size: int, seed: int = 0):
    """(N, R, 3, size, size) uint8 torch tensor: ``renders`` jittered renders of each scene."""
    import torch

    arr = np.stack([np.stack([np.asarray(render(sc, size, seed=_render_seed(seed, i, r))) for r in range(renders)])
                    for i, sc in enumerate(scenes)])                 # (N, R, H, W, 3)
    return torch.from_numpy(arr).permute(0, 1, 4, 2, 3).contiguous()


def observed_scenes(scenes: list[Scene], renders: int, seed: int = 0, corrupt: float = CORRUPT) -> list[list[Scene]]:
    """What each render of ``render_array(scenes, renders, size, seed)`` shows: [scene][render] -> the
    observation (``observe``) that render drew, corrupted attributes included."""
    return [[observe(sc, np.random.default_rng(_render_seed(seed, i, r)), corrupt) for r in range(renders)]
            for i, sc in enumerate(scenes)]


def image_corpus(n_scenes: int = 2000, size: int = 32, seed: int = 0, renders: int = 4):
    """Renders for the image JEPA (the same scenes as ``text_corpus(n_scenes, seed)``)."""
    return render_array(sample_scenes(n_scenes, seed=seed), renders, size, seed=seed)


def held_out_pairs(n_test: int, seed: int, image_size: int):
    """Held-out pairs: a clean (uncorrupted) render and caption of each scene, with seeds apart from
    training's (``n_test`` below the number of scenes takes a subset seeded by ``seed``). Returns
    (scenes, PIL renders, captions)."""
    scenes = all_scenes()
    if n_test and n_test < len(scenes):
        keep = np.sort(np.random.default_rng(seed + 10_000).choice(len(scenes), n_test, replace=False))
        scenes = [scenes[i] for i in keep]
    ims = [render(sc, image_size, seed=900_000 + i, corrupt=0.0) for i, sc in enumerate(scenes)]
    caps = [describe(sc, seed=700_000 + i, corrupt=0.0) for i, sc in enumerate(scenes)]
    return scenes, ims, caps


def latent_features(scenes: list[Scene]) -> np.ndarray:
    """The ground truth as a JEPA would learn it: each attribute's one-hot in an orthonormal basis of
    its centred span, scaled so that every dimension has unit variance over uniformly drawn scenes.
    (N, ``LATENT_DIM``).

    Why whitened: the five attributes' indicators are the view kernel's leading eigenspace, all with
    the same eigenvalue ((1 - CORRUPT)^2), and an isotropy regulariser (VICReg's covariance, SIGReg)
    asks for unit variance in every direction, so the ideal embedding is this space whitened, up to a
    rotation. (Equal variance per *attribute* instead, as the raw centred one-hots give, is another
    metric on the same space: a perfect whitened embedding would score residual 0.07 and mutual 10-NN
    0.50 against it.)
    """
    blocks = []
    for name, options in ATTRS.items():
        k = len(options)
        oh = np.array([[float(getattr(sc, name) == v) for v in options] for sc in scenes], np.float64)
        # orthonormal basis of the vectors orthogonal to the all-ones one: Q of [1 | I[:, :k-1]] minus 1
        basis = np.linalg.qr(np.concatenate([np.ones((k, 1)), np.eye(k)[:, : k - 1]], 1))[0][:, 1:]
        blocks.append(oh @ basis * np.sqrt(k))
    return np.concatenate(blocks, 1).astype(np.float32)
