"""The world as a dataset (``captioner embed --dataset world``, ``eval coco --dataset world``, ...).

The 324 latent scenes are split by a seeded permutation into train / val / test scenes (60 / 10 / 30 %):
no scene is in two splits. Each scene of a split gives ``RENDERS`` samples: a clean render (no
misreported attribute; position, size and shade jitter as in training) with the scene's ``CAPTIONS``
clean captions (different templates and synonyms) as references. The train captions are the world's
caption bank; the test split is the held-out evaluation set. Nothing here imports training code.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

from captioner.world import scenes as W

FRACTIONS = (0.6, 0.1, 0.3)   # train, val, test scenes
RENDERS = 4                   # samples (renders) per scene
CAPTIONS = 5                  # clean reference captions per scene
IMAGE_SIZE = 32


def check_attributes(attrs: dict | None = None) -> dict:
    """The world's attributes (default ``scenes.ATTRS``), refused in one line when one has no values."""
    from captioner.errors import CaptionerError

    attrs = W.ATTRS if attrs is None else attrs
    if not attrs:
        raise CaptionerError("world config: no attributes; give ATTRS in captioner/world/scenes.py at least one")
    for name, values in attrs.items():
        if not values:
            raise CaptionerError(f"world config: attribute {name!r} has no values; give it at least two values "
                                 "(ATTRS in captioner/world/scenes.py) or drop it")
        if len(values) == 1:
            raise CaptionerError(f"world config: attribute {name!r} has one value ({values[0]!r}), which spans no "
                                 "dimension and tells no scene apart; give it at least two values "
                                 "(ATTRS in captioner/world/scenes.py) or drop it")
    return attrs


def fingerprint() -> str:
    """A short hash of everything that defines the world (attributes, words, templates, noise): models
    trained on another world carry another one."""
    check_attributes()
    spec = {"attrs": W.ATTRS, "nouns": W.NOUNS, "colours": W.COLOURS, "sizes": W.SIZES, "cols": W.COLS,
            "rows": W.ROWS, "backgrounds": W.BACKGROUNDS, "templates": W.TEMPLATES, "corrupt": W.CORRUPT}
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:12]


def scene_splits(seed: int = 0) -> dict[str, list[W.Scene]]:
    """{"train", "val", "test"} -> the scenes of that split (disjoint; seeded permutation of all scenes)."""
    check_attributes()
    scenes = W.all_scenes()
    perm = np.random.default_rng(seed + 20_000).permutation(len(scenes))
    a = int(round(FRACTIONS[0] * len(scenes)))
    b = a + int(round(FRACTIONS[1] * len(scenes)))
    return {"train": [scenes[i] for i in perm[:a]], "val": [scenes[i] for i in perm[a:b]],
            "test": [scenes[i] for i in perm[b:]]}


class SceneRender:
    """A zero-argument renderer (``Sample.source``): one clean render of ``scene``."""

    def __init__(self, scene: W.Scene, seed: int, size: int = IMAGE_SIZE):
        self.scene, self.seed, self.size = scene, seed, size

    def __call__(self):
        return W.render(self.scene, self.size, seed=self.seed, corrupt=0.0)

    def __repr__(self):
        return f"SceneRender({self.scene.key()}, seed={self.seed})"


def clean_captions(scene: W.Scene, n: int = CAPTIONS) -> list[str]:
    """``n`` distinct clean captions of ``scene`` (seeded by the scene: the same in every split and seed)."""
    idx = W.all_scenes().index(scene)
    return W.captions(scene, n, seed=8_000_000 + idx, corrupt=0.0)


def world_samples(split: str = "test", seed: int = 0, renders: int = RENDERS) -> list[tuple]:
    """The world dataset's ``split`` (train, val, test or all) for world seed ``seed``: (id, renderer, clean
    captions, scene key) per sample; ``captioner.datasets.get_dataset("world", split)`` wraps them."""
    from captioner.errors import CaptionerError

    splits = scene_splits(seed)
    if split not in (*splits, "all"):
        raise CaptionerError(f"dataset 'world' has no split {split!r}; choose one of train, val, test, all")
    names = list(splits) if split == "all" else [split]
    index = {sc: i for i, sc in enumerate(W.all_scenes())}
    out = []
    for name in names:
        for sc in splits[name]:
            caps = clean_captions(sc)
            for r in range(renders):
                rs = (seed * 1_000_003 + index[sc]) * 17 + r + 50_000_000
                out.append((f"world-s{seed}-{sc.key()}-r{r}", SceneRender(sc, rs), caps, sc.key()))
    return out


def scene_of(sample_id: str) -> str:
    """The scene key of a world sample id (``world-s<seed>-<key>-r<r>``)."""
    return sample_id.split("-", 2)[2].rsplit("-r", 1)[0]
