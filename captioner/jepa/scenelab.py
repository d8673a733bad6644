"""The scene lab: a controlled world where the claim "JEPAs with good views learn the same representation
up to a rotation" can be checked end to end on a CPU.

A latent scene is a set of objects (shape, colour, size, position on a 3 x 3 grid). It is *rendered* to a
small image with PIL (position, size, colour shade, rotation and background jittered per render) and
*described* by paraphrased template captions with synonyms ("a big red circle on the left", "on the left
there is a large crimson disc", ...). The image JEPA sees two renders of one scene; the text JEPA two
paraphrases; the next-token baseline reads a scene's captions as one document. Held-out scenes give
(render, caption) pairs on which the two embedding spaces are compared.
"""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field

import numpy as np

SHAPES = {"circle": ["circle", "disc", "round dot"], "square": ["square", "box", "square block"],
          "triangle": ["triangle", "triangular shape"], "cross": ["cross", "plus sign"],
          "diamond": ["diamond", "rhombus"]}
COLOURS = {"red": ((215, 35, 35), ["red", "crimson"]), "green": ((35, 160, 55), ["green", "grass-green"]),
           "blue": ((40, 75, 215), ["blue", "navy"]), "yellow": ((235, 200, 25), ["yellow", "golden"]),
           "purple": ((135, 55, 175), ["purple", "violet"]), "orange": ((240, 130, 25), ["orange", "amber"])}
SIZES = {"small": (0.10, ["small", "little", "tiny"]), "medium": (0.15, ["medium", "medium-sized", "mid-sized"]),
         "large": (0.21, ["large", "big", "huge"])}
HPOS = {"left": 0.22, "center": 0.5, "right": 0.78}
VPOS = {"top": 0.22, "middle": 0.5, "bottom": 0.78}


def _where(h: str, v: str, rng) -> str:
    """A phrase for a grid cell, drawn from its paraphrases."""
    if (h, v) == ("center", "middle"):
        opts = ["in the middle", "in the centre", "at the center of the picture"]
    elif v == "middle":
        opts = [f"on the {h}", f"at the {h} side", f"on the {h} side of the picture"]
    elif h == "center":
        opts = [f"at the {v}", f"near the {v}", f"at the {v} of the picture"]
    else:
        up = {"top": "upper", "bottom": "lower"}[v]
        opts = [f"in the {v} {h} corner", f"at the {up} {h}", f"in the {up} {h} corner"]
    return opts[rng.integers(len(opts))]


TEMPLATES = [
    "a {size} {colour} {shape} {where}",
    "{where} there is a {size} {colour} {shape}",
    "{where}, a {colour} {shape} that is {size}",
    "the picture shows a {size} {colour} {shape} {where}",
    "{where} you can see a {size} {colour} {shape}",
    "there is a {colour} {shape} {where} and it is {size}",
    "a {shape}, {colour} and {size}, {where}",
    "one {size} {shape} coloured {colour} {where}",
]


@dataclass(frozen=True)
class Obj:
    shape: str
    colour: str
    size: str
    h: str
    v: str


@dataclass(frozen=True)
class Scene:
    objects: tuple

    def key(self) -> str:
        return "|".join(f"{o.size}-{o.colour}-{o.shape}-{o.v}-{o.h}" for o in sorted(self.objects, key=_cell))

    def to_dict(self) -> dict:
        return {"objects": [asdict(o) for o in self.objects]}


def _cell(o: Obj):
    return (list(VPOS).index(o.v), list(HPOS).index(o.h))


def all_objects() -> list[Obj]:
    return [Obj(*t) for t in itertools.product(SHAPES, COLOURS, SIZES, HPOS, VPOS)]


def sample_scenes(n: int, seed: int = 0, n_objects: int = 1, distinct: bool = False) -> list[Scene]:
    """``n`` random scenes of ``n_objects`` objects in distinct grid cells; ``distinct`` = no two alike."""
    rng = np.random.default_rng(seed)
    shapes, colours, sizes, cells = list(SHAPES), list(COLOURS), list(SIZES), list(itertools.product(HPOS, VPOS))
    out, seen = [], set()
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 100 * n + 1000:
            raise ValueError(f"cannot draw {n} distinct scenes of {n_objects} object(s)")
        pick = rng.choice(len(cells), size=n_objects, replace=False)
        objs = tuple(Obj(shapes[rng.integers(5)], colours[rng.integers(6)], sizes[rng.integers(3)], *cells[c])
                     for c in pick)
        sc = Scene(objs)
        if distinct:
            if sc.key() in seen:
                continue
            seen.add(sc.key())
        out.append(sc)
    return out


def describe(scene: Scene, seed: int = 0) -> str:
    """One paraphrased caption of ``scene``; the template, synonyms and object order depend on ``seed``."""
    rng = np.random.default_rng(seed)
    parts = []
    for k in rng.permutation(len(scene.objects)):
        o = scene.objects[k]
        t = TEMPLATES[rng.integers(len(TEMPLATES))]
        syn = SHAPES[o.shape]
        parts.append(t.format(size=SIZES[o.size][1][rng.integers(3)], colour=COLOURS[o.colour][1][rng.integers(2)],
                              shape=syn[rng.integers(len(syn))], where=_where(o.h, o.v, rng)))
    s = " and ".join(parts)
    return s[0].upper() + s[1:] + "."


def captions(scene: Scene, n: int, seed: int = 0) -> list[str]:
    """``n`` distinct paraphrases (fewer only if the scene has fewer)."""
    out, k = [], 0
    while len(out) < n and k < 50 * n:
        c = describe(scene, seed=seed * 100003 + k)
        if c not in out:
            out.append(c)
        k += 1
    return out


def render(scene: Scene, size: int = 32, seed: int = 0, jitter: bool = True, supersample: int = 4):
    """Render ``scene`` to an RGB PIL image ``size`` x ``size``; deterministic given ``seed``.

    Jitter (per render): position +-6% of the side, size +-12%, colour shade +-18 per channel, rotation
    +-15 degrees, background grey level and noise."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    s = size * supersample
    bg = int(235 + (rng.integers(-15, 16) if jitter else 0))
    im = Image.new("RGB", (s, s), (bg, bg, bg))
    d = ImageDraw.Draw(im)
    for o in scene.objects:
        j = (lambda a: rng.uniform(-a, a)) if jitter else (lambda a: 0.0)
        cx = (HPOS[o.h] + j(0.06)) * s
        cy = (VPOS[o.v] + j(0.06)) * s
        r = SIZES[o.size][0] * (1 + j(0.12)) * s
        col = tuple(int(np.clip(c + j(18), 0, 255)) for c in COLOURS[o.colour][0])
        rot = np.deg2rad(j(15))
        if o.shape == "circle":
            d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=col)
            continue
        if o.shape == "square":
            pts = [(-1, -1), (1, -1), (1, 1), (-1, 1)]
            k = 0.85
        elif o.shape == "triangle":
            pts = [(0, -1.1), (1.05, 0.8), (-1.05, 0.8)]
            k = 1.0
        elif o.shape == "diamond":
            pts = [(0, -1.2), (0.8, 0), (0, 1.2), (-0.8, 0)]
            k = 1.0
        else:  # cross
            a, b = 1.0, 0.33
            pts = [(-b, -a), (b, -a), (b, -b), (a, -b), (a, b), (b, b), (b, a), (-b, a), (-b, b), (-a, b),
                   (-a, -b), (-b, -b)]
            k = 1.0
        c, sn = np.cos(rot), np.sin(rot)
        d.polygon([(cx + k * r * (x * c - y * sn), cy + k * r * (x * sn + y * c)) for x, y in pts], fill=col)
    im = im.resize((size, size), Image.LANCZOS)
    if jitter:
        a = np.asarray(im, dtype=np.float32) + rng.normal(0, 4.0, (size, size, 3))
        im = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))
    return im


def text_corpus(n_scenes: int = 2000, seed: int = 0, n_captions: int = 6, n_objects: int = 1):
    """Views corpus: ``n_scenes`` random scenes, each with ``n_captions`` paraphrases."""
    from captioner.jepa.views import ViewsCorpus

    scenes = sample_scenes(n_scenes, seed=seed, n_objects=n_objects)
    return ViewsCorpus("scenelab", [captions(sc, n_captions, seed=seed * 7919 + i) for i, sc in enumerate(scenes)],
                       [f"{i}:{sc.key()}" for i, sc in enumerate(scenes)])


def render_array(scenes: list[Scene], renders: int, size: int, seed: int = 0):
    """(N, R, 3, size, size) uint8 torch tensor: ``renders`` jittered renders of each scene."""
    import torch

    arr = np.stack([np.stack([np.asarray(render(sc, size, seed=(seed * 1000003 + i) * 31 + r)) for r in range(renders)])
                    for i, sc in enumerate(scenes)])                 # (N, R, H, W, 3)
    return torch.from_numpy(arr).permute(0, 1, 4, 2, 3).contiguous()


def image_corpus(n_scenes: int = 2000, size: int = 32, seed: int = 0, renders: int = 4, n_objects: int = 1):
    """Renders for the image JEPA (the same scenes as ``text_corpus(n_scenes, seed)``)."""
    return render_array(sample_scenes(n_scenes, seed=seed, n_objects=n_objects), renders, size, seed=seed)


# ----------------------------------------------------------------------------------------- experiment
@dataclass
class LabConfig:
    preset: str = "tiny"
    n_train: int = 3000
    n_test: int = 400
    n_objects: int = 1
    n_captions: int = 6
    n_renders: int = 4
    image_steps: int = 400
    text_steps: int = 400
    batch_size: int = 64
    k: int = 10
    seed: int = 0
    augment: dict = field(default_factory=lambda: {"crop_scale": [0.8, 1.0], "crop_ratio": [0.9, 1.11],
                                                   "flip": False, "brightness": 0.2, "contrast": 0.2,
                                                   "saturation": 0.1, "hue": False, "noise": 0.02})


def test_pairs(cfg: LabConfig, image_size: int):
    """Held-out (render, caption) pairs of distinct scenes, drawn apart from the training seed."""
    scenes = sample_scenes(cfg.n_test, seed=cfg.seed + 10_000, n_objects=cfg.n_objects, distinct=True)
    ims = [render(sc, image_size, seed=900_000 + i) for i, sc in enumerate(scenes)]
    caps = [describe(sc, seed=700_000 + i) for i, sc in enumerate(scenes)]
    return scenes, ims, caps


def latent_features(scenes: list[Scene]) -> np.ndarray:
    """The ground truth as features: one-hot shape/colour/size + (x, y) per grid cell. (N, 9 * 15)."""
    cells = list(itertools.product(VPOS, HPOS))
    dim = len(SHAPES) + len(COLOURS) + len(SIZES) + 1
    out = np.zeros((len(scenes), len(cells) * dim), np.float32)
    for i, sc in enumerate(scenes):
        for o in sc.objects:
            c = cells.index((o.v, o.h)) * dim
            out[i, c + list(SHAPES).index(o.shape)] = 1
            out[i, c + 5 + list(COLOURS).index(o.colour)] = 1
            out[i, c + 11 + list(SIZES).index(o.size)] = 1
            out[i, c + 14] = 1
    return out


def procrustes_residual(X: np.ndarray, Y: np.ndarray, fit_frac: float = 0.5, seed: int = 0) -> float:
    """Held-out relative residual of the best rotation (+ scale) from X to Y.

    Both sides are centred, scaled to unit RMS norm on the fit half, and zero-padded to a common width;
    ``R = U V^T`` from the SVD of ``X_fit^T Y_fit``, scale ``s = tr(S) / ||X_fit||^2``. Returns
    ``||s X_ev R - Y_ev||^2 / ||Y_ev||^2`` on the other half: 0 = the same space up to a rotation,
    about 1 = unrelated.
    """
    n = len(X)
    perm = np.random.default_rng(seed).permutation(n)
    fi, ev = perm[: int(n * fit_frac)], perm[int(n * fit_frac):]
    X = np.asarray(X, np.float64)
    Y = np.asarray(Y, np.float64)
    d = max(X.shape[1], Y.shape[1])
    X = np.pad(X, ((0, 0), (0, d - X.shape[1])))
    Y = np.pad(Y, ((0, 0), (0, d - Y.shape[1])))
    mx, my = X[fi].mean(0), Y[fi].mean(0)
    X, Y = X - mx, Y - my
    X /= np.sqrt((X[fi] ** 2).sum(1).mean())
    Y /= np.sqrt((Y[fi] ** 2).sum(1).mean())
    u, s, vt = np.linalg.svd(X[fi].T @ Y[fi])
    R = u @ vt
    scale = s.sum() / (X[fi] ** 2).sum()
    return float(((scale * X[ev] @ R - Y[ev]) ** 2).sum() / (Y[ev] ** 2).sum())


def mutual_knn(X, Y, k: int = 10) -> float:
    """Mutual k-NN alignment through the project's metric registry (alignment.metrics)."""
    from alignment.metrics import score

    return float(score("mutual_knn", np.asarray(X, np.float32), np.asarray(Y, np.float32), k=k))


def embed_texts(model, kind: str, texts: list[str], max_len: int, batch: int = 256) -> np.ndarray:
    """(N, D) float32 embeddings of ``texts`` by a trained TextJEPA / NextTokenLM (eval mode, CPU)."""
    import torch

    from captioner.jepa.views import pad, tokenize

    model.eval()
    ids, _ = tokenize(texts, max_len, warn=False)
    out = []
    with torch.no_grad():
        for i in range(0, len(ids), batch):
            x, m = pad(ids[i: i + batch])
            out.append(model.embed(x, m).float().numpy())
    return np.concatenate(out).astype(np.float32)


def embed_images(model, images, batch: int = 256) -> np.ndarray:
    """(N, D) float32 embeddings of PIL images (already at the model's size) by an ImageJEPA."""
    import torch

    from captioner.jepa.views import pil_to_uint8

    model.eval()
    x = pil_to_uint8(images, model.cfg.image_size)
    out = []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            out.append(model.embed(x[i: i + batch].float() / 255.0).float().numpy())
    return np.concatenate(out).astype(np.float32)


def _train_and_load(kind: str, cfg: LabConfig, data, out, progress: bool, steps: int, seed: int, **over):
    from captioner.jepa.model import build_model
    from captioner.jepa.train import load_checkpoint, resolve_config, train

    tc = resolve_config(kind, cfg.preset, corpus="scenelab", steps=steps, batch_size=cfg.batch_size, seed=seed,
                        save_every=steps, **over)
    ckpt = out / "checkpoint.pt"
    if not ckpt.exists() or load_checkpoint(ckpt)["step"] < steps:
        summary = train(tc, out, resume=True, data=data, progress=progress)
    else:
        summary = {"out": str(out), "reused": True}
    ck = load_checkpoint(ckpt)
    model = build_model(kind, tc.text, tc.image, tc.objective)
    model.load_state_dict(ck["model"])
    return model, tc, summary


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
    scenes = sample_scenes(cfg.n_train, seed=cfg.seed, n_objects=cfg.n_objects)
    corpus = V.ViewsCorpus("scenelab", [captions(sc, cfg.n_captions, seed=cfg.seed * 7919 + i)
                                        for i, sc in enumerate(scenes)], [sc.key() for sc in scenes])
    aug = V.AugmentConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in cfg.augment.items()})

    base = resolve_config("image-jepa", cfg.preset)
    img_data = V.ImageViews(render_array(scenes, cfg.n_renders, base.image.image_size, seed=cfg.seed), aug)
    img_model, img_cfg, _ = _train_and_load("image-jepa", cfg, img_data, out / "image-jepa", progress,
                                            cfg.image_steps, cfg.seed, augment=asdict(aug))
    tj_model, tj_cfg, _ = _train_and_load("text-jepa", cfg, V.TokenViews(corpus, base.text.max_len),
                                          out / "text-jepa", progress, cfg.text_steps, cfg.seed)
    ntp_model, _, _ = _train_and_load("ntp", cfg, V.TokenDocuments(corpus, base.text.max_len, seed=cfg.seed),
                                      out / "ntp", progress, cfg.text_steps, cfg.seed)
    torch.manual_seed(cfg.seed)
    untrained = build_model("text-jepa", tj_cfg.text, obj=tj_cfg.objective)

    test_scenes, ims, caps = test_pairs(cfg, img_cfg.image.image_size)
    Z = latent_features(test_scenes)
    Ximg = embed_images(img_model, ims)
    rows = [{"side": "image JEPA (two renders)", "views": "good", "vs": "latents",
             "mutual_knn": mutual_knn(Ximg, Z, cfg.k), "procrustes_residual": procrustes_residual(Ximg, Z)}]
    sides = [("text JEPA (two paraphrases)", "good", tj_model),
             ("next-token LM (one document)", "bad", ntp_model),
             ("untrained text encoder", "none", untrained)]
    for name, views, m in sides:
        Xt = embed_texts(m, "ntp" if views == "bad" else "text-jepa", caps, base.text.max_len)
        rows.append({"side": name, "views": views, "vs": "image JEPA",
                     "mutual_knn": mutual_knn(Xt, Ximg, cfg.k), "procrustes_residual": procrustes_residual(Xt, Ximg),
                     "mutual_knn_latents": mutual_knn(Xt, Z, cfg.k),
                     "procrustes_residual_latents": procrustes_residual(Xt, Z)})
    res = {"config": asdict(cfg), "rows": rows, "n_test": len(test_scenes), "k": cfg.k,
           "chance_mutual_knn": cfg.k / (len(test_scenes) - 1), "seconds": round(time.time() - t0, 1)}
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
    lines.append(f"\n{res['n_test']} held-out scenes (distinct), chance mutual {k}-NN = "
                 f"{res['chance_mutual_knn']:.3f}; residual: held-out, after a rotation + scale fitted on the "
                 f"other half (0 = same space up to a rotation, 1 = unrelated); {res['seconds']} s.")
    return "\n".join(lines)
