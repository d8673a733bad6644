"""The scene lab: a controlled world where the claim "JEPAs with good views learn the same representation
up to a rotation" can be checked end to end on a CPU.

A latent scene is a set of objects, each with a shape (one of five) and four continuous attributes:
horizontal and vertical position, size and hue (circular). Both modalities observe the latent through
noise. A *render* (PIL, 32 px) draws each object at its attributes plus Gaussian jitter; a *caption*
perceives the attributes plus noise of the same scale and names them with coarse words and synonyms
("a big red circle on the far left near the top", "near the top, at the far left, there is a large
crimson disc", ...). Two renders of one scene are the image JEPA's views, two captions the text JEPA's:
the same latent kernel on both sides, which is what the theorem needs. The next-token baseline reads a
scene's captions as one document. Held-out scenes give (render, caption) pairs on which the two
embedding spaces are compared.
"""
from __future__ import annotations

import colorsys
import itertools
from dataclasses import asdict, dataclass, field

import numpy as np

SHAPES = {"circle": ["circle", "disc", "round dot"], "square": ["square", "box", "square block"],
          "triangle": ["triangle", "triangular shape"], "cross": ["cross", "plus sign"],
          "diamond": ["diamond", "rhombus"]}
# hue bins centred on k/6 of the colour circle
HUES = [["red", "crimson"], ["yellow", "golden"], ["green", "emerald"], ["cyan", "turquoise"],
        ["blue", "azure"], ["magenta", "purple"]]
SIZES = [["tiny", "very small"], ["small", "little"], ["large", "big"], ["huge", "very big"]]
XPOS = [["at the far left", "at the left edge"], ["on the left", "left of centre"],
        ["in the centre", "at the horizontal centre"], ["on the right", "right of centre"],
        ["at the far right", "at the right edge"]]
YPOS = [["at the very top", "along the top edge"], ["near the top", "in the upper part"],
        ["halfway up", "at mid height"], ["near the bottom", "in the lower part"],
        ["at the very bottom", "along the bottom edge"]]
NOISE = {"x": 0.05, "y": 0.05, "size": 0.06, "hue": 0.03}   # observation noise, in latent units, both sides
RADIUS = (0.07, 0.2)                                          # object radius (fraction of the side) at size 0, 1
MARGIN = 0.14

TEMPLATES = [
    "a {size} {colour} {shape} {x} {y}",
    "{y}, {x}, there is a {size} {colour} {shape}",
    "{x} and {y} you can see a {colour} {shape} that is {size}",
    "the picture shows a {size} {colour} {shape} {y} {x}",
    "there is a {colour} {shape} {x}, {y}, and it is {size}",
    "a {shape}, {colour} and {size}, {y} {x}",
    "one {size} {shape} coloured {colour}, {x} {y}",
]


@dataclass(frozen=True)
class Obj:
    shape: str
    hue: float    # [0, 1), circular
    size: float   # [0, 1]
    x: float      # [0, 1], left to right
    y: float      # [0, 1], top to bottom


@dataclass(frozen=True)
class Scene:
    objects: tuple

    def key(self) -> str:
        return "|".join(f"{o.shape}-{o.hue:.3f}-{o.size:.3f}-{o.x:.3f}-{o.y:.3f}" for o in self.objects)

    def to_dict(self) -> dict:
        return {"objects": [asdict(o) for o in self.objects]}


def sample_scenes(n: int, seed: int = 0, n_objects: int = 1) -> list[Scene]:
    """``n`` random scenes; with several objects, they sit in distinct thirds of the picture so that
    "on the left" stays meaningful. (Continuous latents: no two scenes are alike.)"""
    rng = np.random.default_rng(seed)
    shapes = list(SHAPES)
    out = []
    for _ in range(n):
        objs = []
        cols = rng.permutation(3)[:n_objects] if n_objects > 1 else [None]
        for c in cols:
            x = rng.uniform(0, 1) if c is None else (c + rng.uniform(0.1, 0.9)) / 3
            objs.append(Obj(shapes[rng.integers(len(shapes))], float(rng.uniform(0, 1)), float(rng.uniform(0, 1)),
                            float(x), float(rng.uniform(0, 1))))
        out.append(Scene(tuple(objs)))
    return out


def _bin(v: float, n: int) -> int:
    return int(np.clip(np.floor(v * n), 0, n - 1))


def describe(scene: Scene, seed: int = 0) -> str:
    """One caption of ``scene``: attributes perceived with noise (``NOISE``), named by coarse words with
    synonyms; template, synonyms, noise and object order all depend on ``seed``."""
    rng = np.random.default_rng(seed)
    parts = []
    for k in rng.permutation(len(scene.objects)):
        o = scene.objects[k]
        hue = (o.hue + rng.normal(0, NOISE["hue"])) % 1.0
        words = {
            "colour": HUES[int(np.floor(hue * 6 + 0.5)) % 6],
            "size": SIZES[_bin(o.size + rng.normal(0, NOISE["size"]), 4)],
            "x": XPOS[_bin(o.x + rng.normal(0, NOISE["x"]), 5)],
            "y": YPOS[_bin(o.y + rng.normal(0, NOISE["y"]), 5)],
            "shape": SHAPES[o.shape],
        }
        t = TEMPLATES[rng.integers(len(TEMPLATES))]
        parts.append(t.format(**{k: v[rng.integers(len(v))] for k, v in words.items()}))
    s = " and ".join(parts)
    return s[0].upper() + s[1:] + "."


def captions(scene: Scene, n: int, seed: int = 0) -> list[str]:
    """``n`` distinct captions (fewer only if the scene's paraphrases run out)."""
    out, k = [], 0
    while len(out) < n and k < 50 * n:
        c = describe(scene, seed=seed * 100003 + k)
        if c not in out:
            out.append(c)
        k += 1
    return out


def _rgb(hue: float) -> tuple:
    return tuple(int(255 * c) for c in colorsys.hsv_to_rgb(hue % 1.0, 0.85, 0.9))


def render(scene: Scene, size: int = 32, seed: int = 0, jitter: bool = True, supersample: int = 4):
    """Render ``scene`` to an RGB PIL image ``size`` x ``size``; deterministic given ``seed``.

    Per render: each attribute is drawn at its value plus Gaussian noise (``NOISE``, the captions' noise),
    rotation +-15 degrees, background grey level and pixel noise."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    s = size * supersample
    bg = int(225 + (rng.integers(-15, 16) if jitter else 0))
    im = Image.new("RGB", (s, s), (bg, bg, bg))
    d = ImageDraw.Draw(im)
    for o in scene.objects:
        def j(key):
            return rng.normal(0, NOISE[key]) if jitter else 0.0

        x = float(np.clip(o.x + j("x"), 0, 1))
        y = float(np.clip(o.y + j("y"), 0, 1))
        cx = (MARGIN + (1 - 2 * MARGIN) * x) * s
        cy = (MARGIN + (1 - 2 * MARGIN) * y) * s
        r = (RADIUS[0] + (RADIUS[1] - RADIUS[0]) * float(np.clip(o.size + j("size"), 0, 1))) * s
        col = _rgb(o.hue + j("hue"))
        rot = np.deg2rad(rng.uniform(-15, 15) if jitter else 0.0)
        if o.shape == "circle":
            d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=col)
            continue
        if o.shape == "square":
            pts, k = [(-1, -1), (1, -1), (1, 1), (-1, 1)], 0.85
        elif o.shape == "triangle":
            pts, k = [(0, -1.1), (1.05, 0.8), (-1.05, 0.8)], 1.0
        elif o.shape == "diamond":
            pts, k = [(0, -1.2), (0.8, 0), (0, 1.2), (-0.8, 0)], 1.0
        else:  # cross
            a, b = 1.0, 0.33
            pts = [(-b, -a), (b, -a), (b, -b), (a, -b), (a, b), (b, b), (b, a), (-b, a), (-b, b), (-a, b),
                   (-a, -b), (-b, -b)]
            k = 1.0
        c, sn = np.cos(rot), np.sin(rot)
        d.polygon([(cx + k * r * (px * c - py * sn), cy + k * r * (px * sn + py * c)) for px, py in pts], fill=col)
    im = im.resize((size, size), Image.LANCZOS)
    if jitter:
        a = np.asarray(im, dtype=np.float32) + rng.normal(0, 4.0, (size, size, 3))
        im = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))
    return im


def text_corpus(n_scenes: int = 2000, seed: int = 0, n_captions: int = 6, n_objects: int = 1):
    """Views corpus: ``n_scenes`` random scenes, each with ``n_captions`` captions."""
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
    embed_dim: int = 16            # both JEPAs: few dimensions, filled by the latents' leading modes
    k: int = 10
    seed: int = 0
    # the renders already carry the observation noise; augmentations here must not move, flip or
    # recolour the object (that would erase what the captions say)
    augment: dict = field(default_factory=lambda: {"crop_scale": [1.0, 1.0], "crop_ratio": [1.0, 1.0],
                                                   "flip": False, "brightness": 0.1, "contrast": 0.1,
                                                   "saturation": 0.0, "hue": False, "noise": 0.02})


def test_pairs(cfg: LabConfig, image_size: int):
    """Held-out (render, caption) pairs: new scenes, renders and captions, apart from the training seeds."""
    scenes = sample_scenes(cfg.n_test, seed=cfg.seed + 10_000, n_objects=cfg.n_objects)
    ims = [render(sc, image_size, seed=900_000 + i) for i, sc in enumerate(scenes)]
    caps = [describe(sc, seed=700_000 + i) for i, sc in enumerate(scenes)]
    return scenes, ims, caps


def latent_features(scenes: list[Scene]) -> np.ndarray:
    """The ground truth as features, per object slot: x, y, size, (cos, sin) of the hue and a one-hot
    shape, each block scaled to unit variance under the prior. (N, n_objects * 10)."""
    rows = []
    for sc in scenes:
        r = []
        for o in sc.objects:
            onehot = [float(o.shape == s) for s in SHAPES]
            r += [(o.x - 0.5) * 3.46, (o.y - 0.5) * 3.46, (o.size - 0.5) * 3.46,
                  np.cos(2 * np.pi * o.hue) * 1.41, np.sin(2 * np.pi * o.hue) * 1.41]
            r += [(v - 0.2) * 2.5 for v in onehot]
        rows.append(r)
    return np.asarray(rows, np.float32)


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
    perm = np.random.default_rng(seed).permutation(len(X))
    fi, ev = perm[: int(len(X) * fit_frac)], perm[int(len(X) * fit_frac):]
    rot = fit_procrustes(X[fi], Y[fi], center=True, scale=True)
    pred = rot.transform(X[ev])
    return float(((pred - Y[ev]) ** 2).sum() / ((Y[ev] - Y[fi].mean(0)) ** 2).sum())


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
                        save_every=steps, text={"embed_dim": cfg.embed_dim}, image={"embed_dim": cfg.embed_dim},
                        **over)
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
