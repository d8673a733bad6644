"""What the world's chain sees for one seed: the train / test splits (``captioner.world.data``), the caption
bank (train captions only), the train pairs (for paired Procrustes only), the two unpaired settings and
the zero-shot prompts.

- **disjoint** (a user without pairs): the train scenes split by a seeded permutation into two disjoint
  sets, 60 / 40 %; the matcher gets renders of the first and captions of the second (no scene in common,
  unequal sizes: 6,000 renders, 5,000 captions, drawn with repetition).
- **same** (the easy case): renders and captions of the same train scenes, shuffled apart.

Both draw their scenes from one skewed prior (``PRIOR``: each attribute's values at unequal
frequencies, as words and things have in any real collection), the same for images and captions. Under
the uniform prior the world is symmetric: permuting the values of an attribute, or the three 3-valued
attributes among themselves, maps the scene distribution onto itself, so about 1.9 million alignments are
equally good for any method without pairs (6! x 2! x 3!^3 x 3!), and the right one is unidentifiable.
**uniform** keeps that case (disjoint scenes, every render and caption once) to show it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from captioner.world.scenes import CARDS
from captioner.world.zeroshot import ATTRIBUTES, attribute_labels, prompts  # noqa: F401  (the report's)

# CARDS: the number of values of each attribute (colour, size, column, row, background), the lattice
# matcher's one piece of knowledge about the world besides the two unpaired clouds.
# key -> (rotation kind in captioner.rotations, its options, the data it is fitted on, table label)
ROTATIONS = {
    "paired": ("paired", {}, "pairs", "paired Procrustes"),
    "pairfree-disjoint": ("pairfree", {"matcher": "ours"}, "disjoint", "pair-free ours (disjoint scenes)"),
    "pairfree-same": ("pairfree", {"matcher": "ours"}, "same", "pair-free ours (same scenes)"),
    "pairfree-uniform": ("pairfree", {"matcher": "ours"}, "uniform",
                         "pair-free ours (disjoint scenes, uniform prior: unidentifiable)"),
    "lattice-disjoint": ("pairfree", {"matcher": "lattice", "cards": CARDS, "max": None}, "disjoint",
                         "pair-free lattice (disjoint scenes)"),
    "lattice-same": ("pairfree", {"matcher": "lattice", "cards": CARDS, "max": None}, "same",
                     "pair-free lattice (same scenes)"),
    # nothing from the world's definition: the attributes and their cardinalities estimated from each cloud
    # (``alignment.lattice.estimate_cards``); opt-in in the default (--scenes all) report, whose table predates it
    "lattice-estimated": ("pairfree", {"matcher": "lattice", "max": None}, "disjoint",
                          "pair-free lattice, cards estimated (disjoint scenes)"),
    # the product's generic default pair-free matcher (``captioner align fit -m pairfree``: auto), beside the
    # lattice matcher that knows the world is a product of attributes
    "auto-disjoint": ("pairfree", {"matcher": "auto"}, "disjoint", "pair-free auto, the product's default (disjoint scenes)"),
    "gw": ("pairfree", {"matcher": "gw", "max": 400}, "disjoint", "POT GW (disjoint scenes, 400 a side)"),
    "random": ("random", {}, "same", "random rotation"),
}
# the report's rotations when none are named (the opt-in ones run only when named)
DEFAULT_ROTATIONS = [k for k in ROTATIONS if k not in ("lattice-estimated", "auto-disjoint")]
# the report's rotations on the encoders trained on the train scenes only (``--scenes train``, issue 40): paired,
# the lattice matcher told the cards, the lattice matcher with nothing from the world's definition, the
# product's generic matcher, and the random floor
TRAIN_SCENES_ROTATIONS = ["paired", "lattice-disjoint", "lattice-estimated", "auto-disjoint", "random"]

# the text-only decoder of each text encoder: trained on the train bank's captions alone (cached)
DECODER = {"preset": "tiny", "steps": 1000, "d_model": 128, "max_len": 32, "vocab_max": 2000, "lr": 2e-3,
           "noise_std": 0.04}

# what the decoder reads: "rotation" (the rotated render itself at a caption's radius) or "projection" (DeCap's
# softmax mean of the bank, temperature 0.03). Chosen on the val split by
# ``python -m eval experiment world-decode-input``: the projection pulls a held-out scene onto the nearest
# train scenes, so the decoded caption names all five attributes right for ~25 % of val renders where the
# rotated render itself gives ~97 % (docs/results/world.md).
DECODE_INPUT = "rotation"

# value frequencies of the unpaired sets: geometric in the value order, a ratio per attribute (distinct, so
# that no two attributes or values share a frequency profile)
PRIOR = {"colour": 0.55, "size": 0.3, "col": 0.45, "row": 0.25, "background": 0.12}
N_IMAGES, N_CAPTIONS = 6000, 5000


@dataclass
class Setting:
    seed: int
    train: object            # CaptionDataset (world, train)
    test: object             # CaptionDataset (world, test)
    bank: list               # unique train captions
    bank_scene: list         # the scene key of each bank caption
    pair_caption: np.ndarray  # (len(train),) the bank row paired with each train render (paired fit only)
    disjoint_images: np.ndarray    # train rows (renders) of the first scene set, drawn by PRIOR
    disjoint_captions: np.ndarray  # bank rows (captions) of the second, disjoint scene set, drawn by PRIOR
    same_images: np.ndarray        # train rows drawn by PRIOR
    same_captions: np.ndarray      # bank rows drawn by PRIOR (independently: no pairs)
    uniform_images: np.ndarray     # train rows of the first scene set, each once
    uniform_captions: np.ndarray   # bank rows of the second scene set, each once
    prompts: dict            # attribute -> [(value, [prompt, ...]), ...]


def setting(seed: int = 0) -> Setting:
    """The world's data for ``seed`` (scene splits, renders and captions seeded by it)."""
    from captioner.datasets import get_dataset

    train = get_dataset("world", "train", seed=seed)
    test = get_dataset("world", "test", seed=seed)
    bank, bank_scene, row = [], [], {}
    for s in train.samples:
        for c in s.captions:
            if c not in row:
                row[c] = len(bank)
                bank.append(c)
                bank_scene.append(s.label)
    # each render paired with one of its scene's captions in turn (render r: caption r mod 5)
    pair_caption = np.array([row[s.captions[int(s.id.rsplit("-r", 1)[1]) % len(s.captions)]]
                             for s in train.samples])
    scenes = sorted({s.label for s in train.samples})
    perm = np.random.default_rng(seed + 30_000).permutation(len(scenes))
    first = {scenes[i] for i in perm[: int(round(0.6 * len(scenes)))]}
    uni_img = np.array([i for i, s in enumerate(train.samples) if s.label in first])
    uni_cap = np.array([j for j, sc in enumerate(bank_scene) if sc not in first])
    rng = np.random.default_rng(seed + 40_000)
    w_img = prior_weights([s.label for s in train.samples])
    w_cap = prior_weights(bank_scene)

    def draw(rows, w, n):
        p = w[rows] / w[rows].sum()
        return rng.choice(rows, size=n, replace=True, p=p)

    every_img, every_cap = np.arange(len(train.samples)), np.arange(len(bank))
    return Setting(seed, train, test, bank, bank_scene, pair_caption,
                   draw(uni_img, w_img, N_IMAGES), draw(uni_cap, w_cap, N_CAPTIONS),
                   draw(every_img, w_img, N_IMAGES), draw(every_cap, w_cap, N_IMAGES), uni_img, uni_cap, prompts())


def prior_weights(scene_keys: list[str]) -> np.ndarray:
    """The PRIOR probability (up to a constant) of each scene key's scene."""
    from captioner.world import scenes as W

    index = {sc.key(): sc for sc in W.all_scenes()}
    out = np.ones(len(scene_keys))
    for a, q in PRIOR.items():
        rank = {v: i for i, v in enumerate(W.ATTRS[a])}
        out *= np.array([q ** rank[getattr(index[k], a)] for k in scene_keys])
    return out


def attribute_values(scene_keys: list[str]) -> dict:
    """attribute -> (N,) the value index (in ``captioner.world.scenes.ATTRS`` order) of each scene key."""
    from captioner.world import scenes as W

    index = {sc.key(): sc for sc in W.all_scenes()}
    return {a: np.array([W.ATTRS[a].index(getattr(index[k], a)) for k in scene_keys]) for a in ATTRIBUTES}


def side_stats(scene_keys: list[str]) -> dict:
    """What one side of an unpaired setting shows: its number of scenes, the effective number (1 / sum of
    squared scene frequencies) and each attribute's value frequencies."""
    from captioner.world import scenes as W

    _, counts = np.unique(scene_keys, return_counts=True)
    p = counts / counts.sum()
    freq = {a: (np.bincount(v, minlength=len(W.ATTRS[a])) / len(v)).tolist()
            for a, v in attribute_values(scene_keys).items()}
    return {"scenes": int(len(counts)), "effective_scenes": float(1.0 / np.sum(p ** 2)), "freq": freq}


def compare_sides(img: dict, cap: dict) -> dict:
    """Whether two sides (``side_stats``) show the same world: per attribute, the total-variation distance of
    the value frequencies and whether the most frequent value is the same. Without pairs the values of an
    attribute are told apart only by these frequencies, so where they disagree the true rotation is not
    the one the data support."""
    tv = {a: 0.5 * float(np.abs(np.subtract(img["freq"][a], cap["freq"][a])).sum()) for a in img["freq"]}
    mode = {a: int(np.argmax(img["freq"][a])) == int(np.argmax(cap["freq"][a])) for a in img["freq"]}
    return {"tv": tv, "max_tv": max(tv.values()), "mode_agrees": mode}


def disjoint_sides(st: Setting) -> dict:
    """``compare_sides`` of the disjoint setting's renders and captions, with both sides' ``side_stats``."""
    a = side_stats([st.train.samples[i].label for i in st.disjoint_images])
    b = side_stats([st.bank_scene[j] for j in st.disjoint_captions])
    return {"images": a, "captions": b, **compare_sides(a, b)}
