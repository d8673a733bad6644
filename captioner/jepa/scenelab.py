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
from dataclasses import asdict, dataclass, field

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
CORRUPT = 0.15         # probability that one observation misreports one attribute (both modalities)
LATENT_DIM = sum(len(v) - 1 for v in ATTRS.values())   # 12: the leading eigenspace of the view kernel

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


def describe(scene: Scene, seed: int = 0, corrupt: float = CORRUPT) -> str:
    """One caption of ``scene`` (an observation: ``corrupt`` > 0 may misreport attributes); template and
    synonyms depend on ``seed``."""
    rng = np.random.default_rng(seed)
    o = observe(scene, rng, corrupt)
    words = {"noun": NOUNS, "colour": COLOURS[o.colour][1], "size": SIZES[o.size][1], "col": COLS[o.col][1],
             "row": ROWS[o.row][1], "bg": BACKGROUNDS[o.background][1]}
    t = TEMPLATES[rng.integers(len(TEMPLATES))]
    s = t.format(**{k: v[rng.integers(len(v))] for k, v in words.items()})
    return s[0].upper() + s[1:] + "."


def captions(scene: Scene, n: int, seed: int = 0, corrupt: float = CORRUPT) -> list[str]:
    """``n`` distinct captions (observations) of ``scene``."""
    out, k = [], 0
    while len(out) < n and k < 50 * n:
        c = describe(scene, seed=seed * 100003 + k, corrupt=corrupt)
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


def text_corpus(n_scenes: int = 2000, seed: int = 0, n_captions: int = 6):
    """Views corpus: ``n_scenes`` random scenes, each with ``n_captions`` captions."""
    from captioner.jepa.views import ViewsCorpus

    scenes = sample_scenes(n_scenes, seed=seed)
    return ViewsCorpus("scenelab", [captions(sc, n_captions, seed=seed * 7919 + i) for i, sc in enumerate(scenes)],
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


# ----------------------------------------------------------------------------------------- experiment
@dataclass
class LabConfig:
    preset: str = "tiny"
    # training scenes (each with n_renders renders and n_captions captions): with 3000 the JEPAs learn the
    # training set's instances as well as their attributes, a warp that held-out scenes show as residual
    # (README, scene lab: started at the answer); 12000 took image vs latents from 0.10 to 0.02-0.03
    n_train: int = 12000
    n_test: int = 324
    n_captions: int = 6
    n_renders: int = 4
    # the defaults are the best of a sweep (README, scene lab): the image JEPA kept losing colour at 1200
    # steps and the text JEPA with an MLP predictor stayed further from the latents than a linear one;
    # 2400 / 1600 steps lost colour on two seeds of three, 4800 / 3200 on one side of one
    image_steps: int = 4800
    text_steps: int = 3200
    batch_size: int = 64
    lr: float = 4e-3               # the image JEPA's (and the text side's when text_lr is None)
    text_lr: float | None = None   # the text JEPA's and the NTP baseline's learning rate (None: lr)
    embed_dim: int = LATENT_DIM    # both JEPAs: the dimension of the view kernel's leading eigenspace
    k: int = 10
    seed: int = 0
    # objective overrides for both JEPAs (ObjectiveConfig fields: reg, reg_weight, target, ...) over the
    # preset's (SIGReg); empty: the preset's as they are
    objective: dict = field(default_factory=lambda: {"reg_weight": 0.1, "pred_hidden": 0})
    # per-side override for the text JEPA and the NTP baseline, merged over ``objective`` (empty: the
    # same objective as the image JEPA); e.g. {"pred_hidden": 128} keeps an MLP predictor on the text side
    # while the image side uses a linear one
    text_objective: dict = field(default_factory=dict)
    # architecture overrides over the preset's (ImageConfig / TextConfig fields). The image default pools
    # the global average (what) and each channel's soft-argmax (where): the tiny preset's "flatten" and
    # then the average beside the flattened map left the image JEPA further from the latents (README,
    # scene lab)
    image: dict = field(default_factory=lambda: {"pool": "mean+coords"})
    text: dict = field(default_factory=dict)
    # a previous lab folder: each model starts from <init_from>/<kind>/checkpoint.pt (train's init_from)
    init_from: str | None = None
    # train each JEPA this many times (init seeds seed, seed + 1000, ...; the same data) and keep the run
    # with the lowest final training loss: a label-free choice (README, scene lab: seeds)
    restarts: int = 1
    # score each JEPA on the ``view_k`` directions of its embedding that one view predicts best
    # (``view_subspace``, fitted on two views of ``view_fit`` training scenes in the JEPA's own modality;
    # no cross-modal pair). None: LATENT_DIM when embed_dim is wider, else the raw embedding; 0: never.
    # The baselines (NTP, untrained) have no good views and are scored raw.
    view_k: int | None = None
    view_fit: int = 3000
    # the renders already carry the observation noise; augmentations here must not move, flip or
    # recolour the object (that would erase what the captions say)
    augment: dict = field(default_factory=lambda: {"crop_scale": [1.0, 1.0], "crop_ratio": [1.0, 1.0],
                                                   "flip": False, "brightness": 0.1, "contrast": 0.1,
                                                   "saturation": 0.0, "hue": False, "noise": 0.02})


def lab_config(lab_dir) -> LabConfig | None:
    """The LabConfig a finished lab in ``lab_dir`` ran with (its scenelab.json; fields that this release no
    longer has are dropped), or None when the folder has no scenelab.json."""
    import json
    from pathlib import Path

    p = Path(lab_dir) / "scenelab.json"
    if not p.is_file():
        return None
    conf = json.loads(p.read_text())["config"]
    return LabConfig(**{k: v for k, v in conf.items() if k in LabConfig.__dataclass_fields__})


def augment_config(cfg: LabConfig):
    """``cfg.augment`` (JSON-friendly lists) as the views' AugmentConfig (tuples)."""
    from captioner.jepa.views import AugmentConfig

    return AugmentConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in cfg.augment.items()})


def test_pairs(cfg: LabConfig, image_size: int):
    """Held-out pairs: a clean (uncorrupted) render and caption of each scene, with seeds apart from
    training's (``cfg.n_test`` below the number of scenes takes a seeded subset)."""
    scenes = all_scenes()
    if cfg.n_test and cfg.n_test < len(scenes):
        keep = np.sort(np.random.default_rng(cfg.seed + 10_000).choice(len(scenes), cfg.n_test, replace=False))
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


def holdout_split(n: int, fit_frac: float = 0.5, seed: int = 0):
    """(fit indices, held-out indices): a seeded random ``fit_frac`` of ``range(n)`` and the rest. Every
    held-out score of the lab (``procrustes_residual``, eval.scenelab_diagnose) splits this way."""
    perm = np.random.default_rng(seed).permutation(n)
    return perm[: int(n * fit_frac)], perm[int(n * fit_frac):]


def whitening(X: np.ndarray, eps: float = 1e-6):
    """``(mean, W)`` with ``(X - mean) @ W`` of identity covariance (ZCA; eigenvalues floored at ``eps``)."""
    X = np.asarray(X, np.float64)
    mu = X.mean(0)
    w, V = np.linalg.eigh((X - mu).T @ (X - mu) / len(X))
    return mu, V @ np.diag(1.0 / np.sqrt(np.maximum(w, eps))) @ V.T


def procrustes_residual(X: np.ndarray, Y: np.ndarray, fit_frac: float = 0.5, seed: int = 0) -> float:
    """Held-out relative residual of the best rotation + scale from X to Y (alignment.procrustes).

    The rotation (with each side's top principal axes when the widths differ) and the scale are fitted
    on a random ``fit_frac`` of the pairs; returns ``||T(X_ev) - Y_ev||^2 / ||Y_ev - mean(Y_fit)||^2`` on
    the rest: 0 = the same space up to a rotation, about 1 = unrelated (1 - held-out R^2).
    """
    from alignment.procrustes import fit_procrustes

    X = np.asarray(X, np.float64)
    Y = np.asarray(Y, np.float64)
    # equal footing: each side at unit RMS row norm, so that the fitted scale is comparable across runs
    X = (X - X.mean(0)) / np.sqrt(((X - X.mean(0)) ** 2).sum(1).mean())
    Y = (Y - Y.mean(0)) / np.sqrt(((Y - Y.mean(0)) ** 2).sum(1).mean())
    fi, ev = holdout_split(len(X), fit_frac, seed)
    rot = fit_procrustes(X[fi], Y[fi], center=True, scale=True)
    pred = rot.transform(X[ev])
    return float(((pred - Y[ev]) ** 2).sum() / ((Y[ev] - Y[fi].mean(0)) ** 2).sum())


def view_subspace(A: np.ndarray, B: np.ndarray, k: int | None = None, eps: float = 1e-6):
    """The ``k`` directions of an embedding along which one view of a scene best predicts the other.

    ``A``, ``B``: (n, D) embeddings of two observations of the same n scenes, in *one* modality (the
    JEPA's own views; no cross-modal pair is used). Both are centred on their joint mean and whitened by
    their joint covariance; the symmetrised cross-covariance between the views is then diagonalised.
    Its eigenvalues estimate the view kernel's eigenvalues on the embedding's span (in this world
    (1 - CORRUPT)^2 = 0.72 for the 12 single-attribute directions, its square for products of two
    attributes), so the top ``k`` eigenvectors are the leading eigenfunctions the theorem is about,
    whatever else a wider embedding holds. With D = k this only whitens (a rotation does not matter).

    Returns ``(mean (D,), P (D, k), eigenvalues (D,) in descending order)``: project with
    ``(X - mean) @ P`` (unit variance, uncorrelated columns).
    """
    A = np.asarray(A, np.float64)
    B = np.asarray(B, np.float64)
    if A.shape != B.shape or A.ndim != 2 or len(A) < 2:
        raise ValueError(f"view_subspace: A and B must be (n, D) of one shape with n >= 2, got {A.shape}, {B.shape}")
    k = A.shape[1] if k is None else k
    if not 1 <= k <= A.shape[1]:
        raise ValueError(f"view_subspace: k must be in 1..{A.shape[1]}, not {k}")
    mu, W = whitening(np.concatenate([A, B]), eps)                     # joint mean and covariance
    Aw, Bw = (A - mu) @ W, (B - mu) @ W
    lam, U = np.linalg.eigh((Aw.T @ Bw + Bw.T @ Aw) / (2 * len(A)))
    order = np.argsort(lam)[::-1]
    return mu, W @ U[:, order[:k]], lam[order]


def mutual_knn(X, Y, k: int = 10) -> float:
    """Mutual k-NN alignment through the project's metric registry (alignment.metrics)."""
    from alignment.metrics import score

    return float(score("mutual_knn", np.asarray(X, np.float32), np.asarray(Y, np.float32), k=k))


def mutual_knn_ceiling(Z: np.ndarray, k: int = 10, noise: float = 0.01, seed: int = 0) -> float:
    """Mutual k-NN between the latents ``Z`` and a random rotation of them plus ``noise`` (per dim): what
    a perfect representation scores. Below 1 because the scenes are discrete: each has 12 neighbours one
    attribute away, all at the same distance, and the noise breaks those ties at random."""
    Z = np.asarray(Z, np.float64)
    rng = np.random.default_rng(seed)
    q = np.linalg.qr(rng.standard_normal((Z.shape[1], Z.shape[1])))[0]
    return mutual_knn(Z, Z @ q + noise * rng.standard_normal(Z.shape), k)


def lookup_optimum(reg: str = "vicreg", reg_weight: float = 0.1, steps: int = 2000, batch_size: int = 128,
                   lr: float = 3e-2, dim: int = LATENT_DIM, corrupt: float = CORRUPT, seed: int = 0,
                   init: str = "random") -> np.ndarray:
    """The JEPA objective optimised over a lookup table: one free ``dim``-vector per latent scene.

    That is an encoder with unlimited capacity that perceives every observation perfectly, so what it
    converges to is the objective's own optimum on this world's view kernel, apart from any encoder.
    The views are the world's observations (each attribute misreported with probability ``corrupt``),
    the loss is the JEPAs' own (``model.JEPA.forward`` with a linear predictor and a stop-gradient
    target: ``(1 - w) * prediction + w * regulariser``). ``init``: "random" (Gaussian rows) or "latents"
    (start at the ideal, ``latent_features``; needs ``dim`` = LATENT_DIM) to see whether the objective
    keeps it or moves away. Returns the (324, dim) table, rows in ``all_scenes()`` order.
    """
    import torch

    from captioner.jepa.model import JEPA, ObjectiveConfig

    if reg not in ("vicreg", "sigreg", "cov"):
        raise ValueError(f"lookup_optimum: reg must be 'vicreg', 'sigreg' or 'cov', not {reg!r}")
    if init not in ("random", "latents") or (init == "latents" and dim != LATENT_DIM):
        raise ValueError(f"lookup_optimum: init must be 'random' or 'latents' (with dim {LATENT_DIM}), not {init!r}")

    class TableJEPA(JEPA):
        """JEPA whose encoder is a free table row per scene index: the loss is JEPA.forward's own."""

        def __init__(self, start, obj):
            super().__init__(start.shape[1], obj)
            self.encoder = torch.nn.Embedding.from_pretrained(start, freeze=False)
            self._make_target()

        @staticmethod
        def _run(enc, idx):
            return enc(idx)

        def embed(self, idx):
            return self.encoder(idx)

    sizes = [len(v) for v in ATTRS.values()]
    codes = np.array(np.unravel_index(np.arange(int(np.prod(sizes))), sizes)).T     # (324, 5), product order
    place = np.array([int(np.prod(sizes[i + 1:])) for i in range(len(sizes))])
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)                                                          # the predictor's init

    def observe_idx(b):
        wrong = rng.random((len(b), len(sizes))) < corrupt
        other = np.stack([rng.integers(k, size=len(b)) for k in sizes], 1)
        return torch.from_numpy((np.where(wrong, other, codes[b]) * place).sum(1))

    start = (torch.from_numpy(latent_features(all_scenes())) if init == "latents"
             else 0.5 * torch.randn(len(codes), dim, generator=gen))
    model = TableJEPA(start, ObjectiveConfig(reg=reg, reg_weight=reg_weight, pred_hidden=0, target="stopgrad"))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    # constant, then a linear decay to 0 over the last quarter: settles in the optimum it found
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, 4.0 * (1 - i / steps)))
    for _ in range(steps):
        b = rng.integers(len(codes), size=batch_size)
        loss = model((observe_idx(b),), (observe_idx(b),), generator=gen)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    table = model.encoder.weight
    return table.detach().numpy().astype(np.float32)


def embed_texts(model, kind: str, texts: list[str], max_len: int, batch: int = 256, pool: str = "mean") -> np.ndarray:
    """(N, D) float32 embeddings of ``texts`` by a trained TextJEPA / NextTokenLM (eval mode, CPU);
    ``pool``: the NextTokenLM's pooling (``NextTokenLM.embed``)."""
    import torch

    from captioner.jepa.views import pad, tokenize

    model.eval()
    ids, _ = tokenize(texts, max_len, warn=False)
    out = []
    with torch.no_grad():
        for i in range(0, len(ids), batch):
            x, m = pad(ids[i: i + batch])
            e = model.embed(x, m, pool=pool) if kind == "ntp" else model.embed(x, m)
            out.append(e.float().numpy())
    return np.concatenate(out).astype(np.float32)


def _embed_uint8(model, x, batch: int = 256) -> np.ndarray:
    """(N, D) float32 embeddings of a (N, 3, H, W) uint8 tensor by an ImageJEPA (eval mode, CPU)."""
    import torch

    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            out.append(model.embed(x[i: i + batch].float() / 255.0).float().numpy())
    return np.concatenate(out).astype(np.float32)


def embed_images(model, images, batch: int = 256) -> np.ndarray:
    """(N, D) float32 embeddings of PIL images (already at the model's size) by an ImageJEPA."""
    from captioner.jepa.views import pil_to_uint8

    return _embed_uint8(model, pil_to_uint8(images, model.cfg.image_size), batch)


def _train_and_load(kind: str, cfg: LabConfig, data, out, progress: bool, steps: int, seed: int, **over):
    from pathlib import Path

    from captioner.errors import CaptionerError
    from captioner.jepa.model import build_model
    from captioner.jepa.train import RUNTIME_FIELDS, config_diff, load_checkpoint, resolve_config, train

    lr = cfg.lr if kind == "image-jepa" or cfg.text_lr is None else cfg.text_lr
    objective = dict(cfg.objective) if kind == "image-jepa" else {**cfg.objective, **cfg.text_objective}
    tc = resolve_config(kind, cfg.preset, corpus="scenelab", steps=steps, batch_size=cfg.batch_size, seed=seed,
                        lr=lr, save_every=max(1, steps // 4), text={**cfg.text, "embed_dim": cfg.embed_dim},
                        image={**cfg.image, "embed_dim": cfg.embed_dim},
                        objective=objective or None, **over,
                        init_from=str(kept_run(cfg.init_from, kind)) if cfg.init_from else None)
    if cfg.init_from and Path(tc.init_from).resolve() == Path(out).resolve():
        raise CaptionerError(f"scenelab --init-from {cfg.init_from}: that is this run's own folder; "
                             "choose another --out")
    ckpt = out / "checkpoint.pt"
    ck = load_checkpoint(ckpt) if ckpt.exists() else None
    if ck is not None:   # a finished run is reused, a killed one resumed: either only if trained as asked
        diff = config_diff(ck["config"], tc.to_dict(), ignore=RUNTIME_FIELDS)
        if diff:
            raise CaptionerError(f"{out} holds a run trained otherwise than asked ({'; '.join(diff)}); pass "
                                 "another --out, or delete that folder to retrain it")
    if ck is None or ck["step"] < steps:
        summary = train(tc, out, resume=True, data=data, progress=progress)
        ck = load_checkpoint(ckpt)
    else:
        summary = {"out": str(out), "reused": True}
    model = build_model(kind, tc.text, tc.image, tc.objective)
    model.load_state_dict(ck["model"])
    return model, tc, summary


def kept_run(lab_dir, kind: str):
    """The run folder of ``kind`` that a finished lab in ``lab_dir`` kept: ``<lab_dir>/<kind>``, or with
    restarts the one its scenelab.json names (``<kind>-r<i>``)."""
    import json
    from pathlib import Path

    lab_dir = Path(lab_dir)
    p = lab_dir / "scenelab.json"
    restarts = (json.loads(p.read_text()).get("restarts") or {}).get(kind) if p.is_file() else None
    if not restarts:
        return lab_dir / kind
    i = min(range(len(restarts)), key=lambda j: restarts[j][1])
    return lab_dir / (kind if i == 0 else f"{kind}-r{i}")


def final_loss(run, frac: float = 0.1) -> float:
    """Mean training loss over the last ``frac`` of a run's logged steps (its log.csv)."""
    from captioner.jepa.train import read_log

    log = read_log(run)
    tail = log[-max(1, int(len(log) * frac)):]
    return float(np.mean([r["loss"] for r in tail]))


def _train_best(kind: str, cfg: LabConfig, data, out, progress: bool, steps: int, **over):
    """``_train_and_load`` ``cfg.restarts`` times (the first in ``out``, the others in ``out``-r1, ...), and
    the one with the lowest ``final_loss``; also returns [(seed, final loss)] and the model of every restart."""
    from pathlib import Path

    if cfg.restarts < 1:
        from captioner.errors import CaptionerError

        raise CaptionerError(f"scenelab restarts must be >= 1, not {cfg.restarts}")
    best, losses, models = None, [], []
    for r in range(cfg.restarts):
        run = Path(out) if r == 0 else Path(f"{out}-r{r}")
        got = _train_and_load(kind, cfg, data, run, progress, steps, cfg.seed + 1000 * r, **over)
        losses.append((cfg.seed + 1000 * r, final_loss(run)))
        models.append(got[0])
        if best is None or losses[-1][1] < best[0]:
            best = (losses[-1][1], got)
    return (*best[1], losses, models)


def run_lab(cfg: LabConfig | None = None, out=None, progress: bool = True) -> dict:
    """Train an image JEPA (two renders of one scene), a text JEPA (two paraphrases) and the NTP baseline
    (a scene's captions as one document) on ``cfg.n_train`` scenes; compare on ``cfg.n_test`` held-out pairs.

    Returns
    -------
    dict with "rows" (one per text side: mutual k-NN with the image JEPA, held-out Procrustes residual, and
    the same against the ground-truth latents), "config" and "seconds". Written as JSON + Markdown to
    ``out`` (default ``<home>/runs/scenelab``), reusing trained checkpoints found there.
    """
    import time
    from pathlib import Path

    import torch

    from captioner.jepa import views as V
    from captioner.jepa.model import build_model
    from captioner.jepa.train import resolve_config
    from captioner.paths import atomic_write_json, subdir

    cfg = cfg or LabConfig()
    out = Path(out) if out else subdir("runs") / "scenelab"
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    scenes = sample_scenes(cfg.n_train, seed=cfg.seed)
    corpus = V.ViewsCorpus("scenelab", [captions(sc, cfg.n_captions, seed=cfg.seed * 7919 + i)
                                        for i, sc in enumerate(scenes)], [sc.key() for sc in scenes])
    aug = augment_config(cfg)

    base = resolve_config("image-jepa", cfg.preset, text=cfg.text or None, image=cfg.image or None)
    img_data = V.ImageViews(render_array(scenes, cfg.n_renders, base.image.image_size, seed=cfg.seed), aug)
    img_model, img_cfg, _, img_losses, img_models = _train_best("image-jepa", cfg, img_data, out / "image-jepa",
                                                                progress, cfg.image_steps, augment=asdict(aug))
    tj_model, tj_cfg, _, tj_losses, tj_models = _train_best("text-jepa", cfg, V.TokenViews(corpus, base.text.max_len),
                                                            out / "text-jepa", progress, cfg.text_steps)
    ntp_model, _, _ = _train_and_load("ntp", cfg, V.TokenDocuments(corpus, base.text.max_len, seed=cfg.seed),
                                      out / "ntp", progress, cfg.text_steps, cfg.seed)
    torch.manual_seed(cfg.seed)
    untrained = build_model("text-jepa", tj_cfg.text, obj=tj_cfg.objective)

    test_scenes, ims, caps = test_pairs(cfg, img_cfg.image.image_size)
    Z = latent_features(test_scenes)
    view_k = (LATENT_DIM if cfg.embed_dim > LATENT_DIM else 0) if cfg.view_k is None else cfg.view_k
    n_fit = min(cfg.view_fit, len(scenes))

    def fit_view(model, side):
        """view_subspace of a JEPA on two training views of the first n_fit scenes (renders / captions 0, 1)."""
        if side == "image":
            a, b = (_embed_uint8(model, img_data.images[:n_fit, r]) for r in (0, 1))
        else:
            a, b = (embed_texts(model, "text-jepa", [c[r] for c in corpus.scenes[:n_fit]], base.text.max_len)
                    for r in (0, 1))
        return view_subspace(a, b, view_k)

    def project(p, X):
        return X if p is None else ((X - p[0]) @ p[1]).astype(np.float32)

    proj = {"image": fit_view(img_model, "image"), "text": fit_view(tj_model, "text")} if view_k else {}
    Ximg = project(proj.get("image"), embed_images(img_model, ims))
    rows = [{"side": "image JEPA (two renders)", "views": "good", "vs": "latents",
             "mutual_knn": mutual_knn(Ximg, Z, cfg.k), "procrustes_residual": procrustes_residual(Ximg, Z)}]
    # the baselines have no good views to fit a view subspace on: scored raw
    # the next-token LM twice: at the mean of its final states, and at its last token (the closing [SEP],
    # having read the whole caption), the same model
    sides = [("text JEPA (two paraphrases)", "good", tj_model, proj.get("text"), "mean"),
             ("next-token LM (one document)", "bad", ntp_model, None, "mean"),
             ("next-token LM, last token", "bad", ntp_model, None, "last"),
             ("untrained text encoder", "none", untrained, None, "mean")]
    for name, views, m, p, pool in sides:
        Xt = project(p, embed_texts(m, "ntp" if views == "bad" else "text-jepa", caps, base.text.max_len, pool=pool))
        rows.append({"side": name, "views": views, "vs": "image JEPA",
                     "mutual_knn": mutual_knn(Xt, Ximg, cfg.k), "procrustes_residual": procrustes_residual(Xt, Ximg),
                     "mutual_knn_latents": mutual_knn(Xt, Z, cfg.k),
                     "procrustes_residual_latents": procrustes_residual(Xt, Z)})
    res = {"config": asdict(cfg), "rows": rows, "n_test": len(test_scenes), "k": cfg.k,
           "chance_mutual_knn": cfg.k / (len(test_scenes) - 1),
           "mutual_knn_ceiling": mutual_knn_ceiling(Z, cfg.k, seed=cfg.seed), "seconds": round(time.time() - t0, 1)}
    if proj:
        res["view_eigenvalues"] = {side: [float(v) for v in p[2]] for side, p in proj.items()}
        res["view_k"] = view_k
    if cfg.restarts > 1:
        res["restarts"] = {"image-jepa": img_losses, "text-jepa": tj_losses}
        # scored against the latents after the choice (which used the training loss only), to check it
        res["restart_residuals"] = {
            "image-jepa": [procrustes_residual(project(fit_view(m, "image") if view_k else None,
                                                       embed_images(m, ims)), Z) for m in img_models],
            "text-jepa": [procrustes_residual(project(fit_view(m, "text") if view_k else None,
                                                      embed_texts(m, "text-jepa", caps, base.text.max_len)), Z)
                          for m in tj_models]}
    atomic_write_json(out / "scenelab.json", res)
    (out / "scenelab.md").write_text(format_table(res) + "\n")
    return res


def format_table(res: dict) -> str:
    """Markdown table of ``run_lab``'s result."""
    k = res["k"]
    lines = [f"| representation | views | vs | mutual {k}-NN | Procrustes residual | mutual {k}-NN vs latents "
             "| residual vs latents |", "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for r in res["rows"]:
        lat = (f"{r['mutual_knn_latents']:.3f} | {r['procrustes_residual_latents']:.3f}"
               if "mutual_knn_latents" in r else "- | -")
        lines.append(f"| {r['side']} | {r['views']} | {r['vs']} | {r['mutual_knn']:.3f} | "
                     f"{r['procrustes_residual']:.3f} | {lat} |")
    ceiling = (f", ceiling (the latents vs a rotation of them + 1% noise) = {res['mutual_knn_ceiling']:.3f}"
               if "mutual_knn_ceiling" in res else "")
    lines.append(f"\n{res['n_test']} held-out scenes (distinct), chance mutual {k}-NN = "
                 f"{res['chance_mutual_knn']:.3f}{ceiling}; residual: held-out, after a rotation + scale fitted on the "
                 f"other half (0 = same space up to a rotation, 1 = unrelated); {res['seconds']} s.")
    for side, lam in (res.get("view_eigenvalues") or {}).items():
        kk = res["view_k"]
        nxt = f", then {lam[kk]:.3f} .. {lam[-1]:.3f}" if len(lam) > kk else ""
        lines.append(f"{side} JEPA scored on its {kk} most view-predictable of {len(lam)} directions "
                     f"(view_subspace; cross-view correlation {lam[0]:.3f} .. {lam[kk - 1]:.3f}{nxt}).")
    for kind, losses in (res.get("restarts") or {}).items():
        best = min(losses, key=lambda x: x[1])
        lines.append(f"{kind}: {len(losses)} restarts, final training loss "
                     + ", ".join(f"{v:.4f} (seed {sd})" for sd, v in losses) + f"; kept seed {best[0]}.")
        resid = (res.get("restart_residuals") or {}).get(kind)
        if resid:
            lines.append(f"{kind}: residual vs latents per restart (not used to choose) "
                         + ", ".join(f"{v:.3f}" for v in resid) + ".")
    conf = res.get("config") or {}
    if conf.get("init_from"):
        reg = (conf.get("objective") or {}).get("reg", "sigreg")
        lines.append(f"Each model started from its checkpoint in {conf['init_from']} (fine-tuned with reg {reg}).")
    return "\n".join(lines)
