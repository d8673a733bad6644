"""Would a larger world let a pair-free matcher align disjoint scenes? The world with ideal encoders.

The world report (docs/results/world.md) finds the pair-free rotation on the *same* scenes (one seed of three
with the trained JEPAs) and never on *disjoint* ones, and ``eval.experiments.world_disjoint`` shows why for
the lab world: each disjoint side is a handful of effective scenes whose statistics disagree. This experiment
asks whether a larger world would fix it, without training anything: it replaces both JEPAs by the ideal
encoder the theorem describes, the scene's one-hot attribute code (centred and whitened over the uniform world:
``sum(values) - len(values)`` dimensions), the caption side one random rotation away, plus Gaussian noise
(``--noise``, in units of the whitened coordinates). Everything else is the report's setting
(``captioner.world.setting``): 60 % of the scenes for training, split 60 / 40 % into the renders' and the
captions' scene sets, 6,000 renders and 5,000 captions drawn with repetition from a skewed prior (each
attribute's values at geometric frequencies, one ratio per attribute), or both sides drawn from all the train
scenes (``same``). R@1 on the held-out 40 % of scenes: each rotated clean render code against the clean
caption codes of those scenes (1 / (number of test scenes) by chance).

    python -m eval experiment world-ideal [--seeds 3] [--noise 0.2] [--auto] [--lattice] [--json] [--out FILE]

Worlds: ``lab`` (the report's world: 6 colours x 2 sizes x 3 columns x 3 rows x 3 backgrounds = 324 scenes,
its prior), ``lab, milder prior`` (more effective scenes a side), and a 3,600-scene world (12 x 3 x 5 x 5 x 4)
at three skews.
"""
from __future__ import annotations

import os
import sys
import time

import click
import numpy as np

from captioner.world.data import FRACTIONS
from captioner.world.scenes import ATTRS
from captioner.world.setting import ATTRIBUTES, N_CAPTIONS, N_IMAGES, PRIOR
from eval.experiments import emit

LAB_VALUES = tuple(len(ATTRS[a]) for a in ATTRIBUTES)  # 6, 2, 3, 3, 3
REPORT_PRIOR = tuple(PRIOR[a] for a in ATTRIBUTES)  # 0.55, 0.3, 0.45, 0.25, 0.12
# name -> (values per attribute, geometric ratio of each attribute's value frequencies)
WORLDS = {
    "lab (324 scenes), report prior": (LAB_VALUES, REPORT_PRIOR),
    "lab (324 scenes), milder prior": (LAB_VALUES, (0.8, 0.5, 0.7, 0.6, 0.4)),
    "3,600 scenes, report prior": ((12, 3, 5, 5, 4), REPORT_PRIOR),
    "3,600 scenes, milder prior": ((12, 3, 5, 5, 4), (0.8, 0.5, 0.7, 0.6, 0.4)),
    "3,600 scenes, mild prior": ((12, 3, 5, 5, 4), (0.9, 0.7, 0.85, 0.8, 0.6)),
}
TRAIN = FRACTIONS[0]  # the world's train share of the scenes
FIRST = 0.6  # the renders' share of the train scenes in the disjoint setting (captioner.world.setting.setting)


def ideal_codes(values) -> tuple[np.ndarray, np.ndarray]:
    """(scenes (S, A) value indices, codes (S, d)): every scene's one-hot attribute code, centred and whitened
    over the uniform world (``alignment.lattice.ideal_lattice``)."""
    from alignment.lattice import ideal_lattice

    return ideal_lattice(values)


def run(values, ratios, setting: str = "disjoint", noise: float = 0.2, seed: int = 0, method: str = "ours") -> dict:
    from alignment.pairfree import match

    rng = np.random.default_rng(seed)
    scenes, E = ideal_codes(values)
    d = E.shape[1]
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    w = np.prod([np.asarray(q, float) ** scenes[:, a] for a, q in enumerate(ratios)], axis=0)
    perm = rng.permutation(len(scenes))
    n_train = int(round(TRAIN * len(scenes)))
    train, test = perm[:n_train], perm[n_train:]
    order = rng.permutation(train)
    first, second = order[:int(round(FIRST * len(train)))], order[int(round(FIRST * len(train))):]
    if setting == "same":
        first = second = train

    def draw(rows, n):
        return rng.choice(rows, size=n, replace=True, p=w[rows] / w[rows].sum())

    def effective(rows):
        p = w[rows] / w[rows].sum()
        return float(1.0 / np.sum(p ** 2))

    X = E[draw(first, N_IMAGES)] + noise * rng.standard_normal((N_IMAGES, d))
    Y = E[draw(second, N_CAPTIONS)] @ Q + noise * rng.standard_normal((N_CAPTIONS, d))
    t = time.perf_counter()
    kw = {"cards": values} if method == "lattice" else {}
    res = match(X.astype(np.float32), Y.astype(np.float32), method=method, **kw)
    fit_s = time.perf_counter() - t
    A = res.rotation.transform(E[test].astype(np.float32))
    B = E[test] @ Q
    A = A - A.mean(0)
    B = B - B.mean(0)
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    B /= np.linalg.norm(B, axis=1, keepdims=True)
    r1 = float((np.argmax(A @ B.T, 1) == np.arange(len(test))).mean())
    return {"scenes": int(len(scenes)), "dim": int(d), "setting": setting, "method": method, "seed": seed,
            "noise": noise, "effective_scenes": [round(effective(first), 1), round(effective(second), 1)],
            "test_scenes": int(len(test)), "r_at_1": round(r1, 3), "fit_s": round(fit_s, 1)}


def experiment(seeds: int = 3, noise: float = 0.2, auto: bool = False, lattice: bool = False) -> dict:
    rows = []
    for name, (values, ratios) in WORLDS.items():
        for setting in ("same", "disjoint"):
            methods = ("ours",) + (("auto",) if auto and name.startswith("lab") else ()) + \
                (("lattice",) if lattice and name.startswith("lab") else ())
            for method in methods:
                for seed in range(seeds):
                    r = run(values, ratios, setting, noise, seed, method)
                    rows.append({"world": name, **r})
                    print(f"[world_ideal] {name} {setting} {method} seed {seed}: R@1 {r['r_at_1']:.3f} "
                          f"({r['fit_s']} s)", file=sys.stderr, flush=True)
    return {"noise": noise, "seeds": seeds, "rows": rows, "loadavg": [round(x, 2) for x in os.getloadavg()]}


def table(res: dict) -> str:
    groups: dict = {}
    for r in res["rows"]:
        groups.setdefault((r["world"], r["setting"], r["method"]), []).append(r)
    lines = ["| world | dims | setting | matcher | effective scenes img / cap (mean) | R@1 per seed | chance |",
             "|---|---|---|---|---|---|---|"]
    for (world, setting, method), rs in groups.items():
        eff = np.mean([r["effective_scenes"] for r in rs], 0)
        lines.append(f"| {world} | {rs[0]['dim']} | {setting} | {method} | {eff[0]:.0f} / {eff[1]:.0f} | "
                     + " / ".join(f"{r['r_at_1']:.3f}" for r in rs) + f" | {1 / rs[0]['test_scenes']:.4f} |")
    return "\n".join(lines)


@click.command("world-ideal", help=__doc__)
@click.option("--seeds", type=int, default=3, show_default=True)
@click.option("--noise", type=float, default=0.2, show_default=True, help="Gaussian noise on the whitened codes")
@click.option("--auto", is_flag=True, help="also the 'auto' matcher on the lab worlds (minutes)")
@click.option("--lattice", is_flag=True,
              help="also the lattice matcher (alignment.lattice) on the lab worlds; it needs noise <= 0.05")
@click.option("--json", "as_json", is_flag=True, help="print only the JSON")
@click.option("--out", default=None, help="also write the JSON here")
def cli(seeds, noise, auto, lattice, as_json, out):
    res = experiment(seeds, noise, auto, lattice)
    emit(res, out, as_json, table(res))
