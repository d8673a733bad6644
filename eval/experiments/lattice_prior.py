"""The lattice matcher held to a reviewer's standard, on synthetic lattices (no JEPA is trained).

Two unpaired clouds of *disjoint* scenes share one additive attribute lattice (the world's cards, 6 x 2 x 3 x 3
x 3) up to a rotation. The caption side differs from the image side the way real captions do:

- its own **prior**: each value's frequency multiplied by ``1 + u``, ``u ~ U(-perturb, +perturb)``, drawn
  once per value (a relative perturbation of up to +-perturb), so adjacent values may swap their order;
- **omissions**: a share ``omit`` of the captions leave out one attribute (chosen uniformly); such a caption's
  embedding lacks that attribute's component, i.e. sits at the attribute's mean (zero: value vectors sum to
  zero over the values);
- its own **space**: both clouds live in ``dim`` dimensions (the lattice in a random 12-d subspace, different
  on the two sides) with isotropic Gaussian noise of ``noise`` x the lattice's per-axis RMS in every dimension.

Two lattice shapes: ``ideal`` (the theorem's ideal encoder: one-hot codes whitened over the uniform lattice, so
every attribute's values form a regular simplex and every value permutation is an isometry: only frequencies
can tell values apart) and ``generic`` (the one-hot code times one random matrix shared by both sides: the
same lattice up to a rotation, but with unequal value-to-value distances, as a trained encoder gives).

:func:`run` sweeps the divergence and the dimension over seeds and returns a dict (JSON-able); :func:`table`
renders it as Markdown. Compared: the old matcher (``cards`` given, values matched by frequency order,
``correspondence="frequency"``) and the new one (``cards=None``: estimated from each cloud; candidate
correspondences ranked by the residual of the one orthogonal map they imply, frequency breaking ties).
"""
from __future__ import annotations

import itertools
import time

import click
import numpy as np

CARDS = (6, 2, 3, 3, 3)                 # the world's colour, size, column, row, background
SKEW = (0.78, 0.6, 0.7, 0.75, 0.65)     # value j of attribute a drawn with weight SKEW[a] ** j (image side)
N_X, N_Y = 2000, 1500


def lattice_codes(cards=CARDS, shape: str = "ideal", rng=None) -> tuple[np.ndarray, list]:
    """(scenes (S, A) value indices, value vectors: A arrays (k_a, d)), d = sum(k_a - 1), each attribute's
    values summing to zero. ``ideal``: the whitened one-hot code (``alignment.lattice.ideal_lattice``);
    ``generic``: the centred one-hot code times a random (sum(k), d) matrix, scaled to the ideal's energy."""
    from alignment.lattice import ideal_lattice

    scenes, E = ideal_lattice(cards)
    d = E.shape[1]
    values = []
    for a, k in enumerate(cards):
        # value j's vector: the mean code of the scenes with value j (the codes are additive and centred)
        values.append(np.stack([E[scenes[:, a] == j].mean(0) for j in range(k)]))
    if shape == "generic":
        ideal_total = sum(float((v * v).sum()) for v in values)
        M = np.eye(d) + 0.3 * rng.standard_normal((d, d)) / np.sqrt(d)   # well conditioned, not orthogonal
        values = [v @ M for v in values]
        total = sum(float((v * v).sum()) for v in values)
        values = [v * np.sqrt(ideal_total / total) for v in values]
    elif shape != "ideal":
        raise ValueError(f"shape must be 'ideal' or 'generic', got {shape!r}")
    return scenes, values


def prior(cards=CARDS, skew=SKEW, perturb: float = 0.0, rng=None) -> list:
    """A arrays (k_a,): value weights ``skew[a] ** j``, each times ``1 + U(-perturb, perturb)``, normalised."""
    out = []
    for a, k in enumerate(cards):
        w = np.asarray(skew[a], float) ** np.arange(k)
        if perturb:
            w = w * (1 + rng.uniform(-perturb, perturb, k))
        out.append(w / w.sum())
    return out


def clouds(seed: int = 0, dim: int = 32, noise: float = 0.05, perturb: float = 0.0, omit: float = 0.0,
           shape: str = "ideal", cards=CARDS, skew=SKEW, n_x: int = N_X, n_y: int = N_Y) -> dict:
    """One unpaired problem (module docstring): images of half of the lattice's scenes, captions of the other
    half, each side in its own ``dim``-d space. Returns the clouds X (n_x, dim), Y (n_y, dim), the true
    labels (n, A) of each row, the caption rows' omitted attribute (-1: none), the value vectors, and the two
    embeddings (x -> Y's space) of every lattice point for scoring: ``protos_x``, ``protos_y`` (S, dim)."""
    rng = np.random.default_rng(seed)
    scenes, values = lattice_codes(cards, shape, rng)
    d = values[0].shape[1]
    if dim < d:
        raise ValueError(f"dim {dim} is below the lattice's {d} dimensions")
    codes = sum(values[a][scenes[:, a]] for a in range(len(cards)))           # (S, d)
    rms = float(np.sqrt((codes ** 2).sum(1).mean() / d))                      # per-axis RMS of the lattice
    half = np.zeros(len(scenes), bool)
    half[rng.permutation(len(scenes))[: len(scenes) // 2]] = True

    def draw(p, keep, n):
        w = np.prod([p[a][scenes[:, a]] for a in range(len(cards))], axis=0) * keep
        return rng.choice(len(scenes), n, p=w / w.sum())

    ix = draw(prior(cards, skew), half, n_x)
    iy = draw(prior(cards, skew, perturb, rng), ~half, n_y)
    Qx = np.linalg.qr(rng.standard_normal((dim, dim)))[0][:d]                 # (d, dim) orthonormal rows
    Qy = np.linalg.qr(rng.standard_normal((dim, dim)))[0][:d]
    cy = codes[iy].copy()
    omitted = -np.ones(n_y, int)
    drop = rng.random(n_y) < omit
    omitted[drop] = rng.integers(0, len(cards), int(drop.sum()))
    for i in np.where(drop)[0]:
        a = omitted[i]
        cy[i] -= values[a][scenes[iy[i], a]]          # the attribute's component gone: its mean (zero) instead
    X = codes[ix] @ Qx + noise * rms * rng.standard_normal((n_x, dim))
    Y = cy @ Qy + noise * rms * rng.standard_normal((n_y, dim))
    return {"X": X, "Y": Y, "labels_x": scenes[ix], "labels_y": scenes[iy], "omitted_y": omitted,
            "scenes": scenes, "values": values, "protos_x": codes @ Qx, "protos_y": codes @ Qy,
            "cards": tuple(cards)}


def value_accuracy(res, prob: dict) -> float:
    """The share of X's attribute values matched to the true caption-side value: each side's fitted labels
    named by the true (attribute, value) most of their rows carry, then the matcher's correspondence read
    through those names. 0 when the matcher's cards are not the true ones."""
    info = res.info
    cards = tuple(info["cards"])
    if sorted(cards) != sorted(prob["cards"]) or "labels_x" not in info:
        return 0.0

    def names(labels, truth, keep):
        out = {}
        for a in range(labels.shape[1]):
            for v in range(cards[a]):
                rows = (labels[:, a] == v) & keep
                best, hits = None, -1
                for t in range(truth.shape[1]):
                    if prob["cards"][t] != cards[a] or not rows.any():
                        continue
                    c = np.bincount(truth[rows, t], minlength=prob["cards"][t])
                    if c.max() > hits:
                        best, hits = (t, int(c.argmax())), int(c.max())
                out[a, v] = best
        return out

    nx = names(info["labels_x"], prob["labels_x"], np.ones(len(prob["labels_x"]), bool))
    ny = names(info["labels_y"], prob["labels_y"], prob["omitted_y"] < 0)
    right = total = 0
    for a, c in enumerate(info["correspondence"]):
        for vx, vy in zip(c["x_values"], c["y_values"]):
            right += nx[a, vx] is not None and nx[a, vx] == ny[c["y_attribute"], vy]
            total += 1
    return right / max(total, 1)


def prototype_accuracy(res, prob: dict) -> float:
    """R@1 of every lattice point (324, most seen by neither side: held out): its image-side embedding mapped
    by the matcher lands nearest its own caption-side embedding."""
    got = res.rotation.transform(prob["protos_x"].astype(np.float32))
    want = prob["protos_y"]
    d2 = (got * got).sum(1)[:, None] - 2 * got @ want.T + (want * want).sum(1)[None]
    return float(np.mean(d2.argmin(1) == np.arange(len(want))))


# (prior perturbation, omission, dimension): the divergence at 32 dimensions, then the dimension at the largest
GRID = [(0.3, 0.2, 32), (0.0, 0.0, 32), (0.3, 0.2, 64), (0.3, 0.2, 12), (0.1, 0.1, 32), (0.2, 0.2, 32),
        (0.3, 0.0, 32)]


def run(seeds=(0, 1, 2), shapes=("ideal", "generic"), grid=GRID, noise: float = 0.05) -> dict:
    """The sweep: for each lattice shape, (perturbation, omission, dimension) of ``grid`` and seed, three
    matchers on the same problem: ``old`` (cards given, frequency order: the matcher before issue 40),
    ``geo`` (cards given, geometry-aware correspondence; the same factorisations as old) and ``new`` (cards
    estimated from each cloud, rows at an attribute's mean set aside, geometry-aware). Returns
    ``{"rows": [...], "config": {...}}``, one row per (shape, perturb, omit, dim) with per-seed lists:
    ``cards_ok`` (sides whose estimated cards are the true multiset, of 2), value accuracy
    (:func:`value_accuracy`) and prototype R@1 (:func:`prototype_accuracy`) per matcher, seconds of new."""
    from alignment.lattice import match_lattice

    rows = []
    for shape, (perturb, omit, dim) in itertools.product(shapes, grid):
        per = {k: [] for k in ("cards_ok", "old_values", "old_protos", "geo_values", "geo_protos", "new_values",
                               "new_protos", "seconds_old", "seconds_new")}
        for seed in seeds:
            prob = clouds(seed, dim, noise, perturb, omit, shape)
            t0 = time.perf_counter()
            old = match_lattice(prob["X"], prob["Y"], CARDS, seed=seed, correspondence="frequency")
            t1 = time.perf_counter()
            geo = match_lattice(prob["X"], prob["Y"], CARDS, seed=seed, correspondence="geometry")
            t2 = time.perf_counter()
            new = match_lattice(prob["X"], prob["Y"], None, seed=seed)
            est = new.info["cards_estimated"]
            per["cards_ok"].append(sum(sorted(est[s]["cards"]) == sorted(CARDS) for s in ("x", "y")))
            per["seconds_old"].append(round(t1 - t0, 1))
            per["seconds_new"].append(round(time.perf_counter() - t2, 1))
            for name, res in (("old", old), ("geo", geo), ("new", new)):
                per[f"{name}_values"].append(round(value_accuracy(res, prob), 3))
                per[f"{name}_protos"].append(round(prototype_accuracy(res, prob), 3))
        rows.append({"shape": shape, "perturb": perturb, "omit": omit, "dim": dim, **per})
    return {"rows": rows, "config": {"cards": list(CARDS), "skew": list(SKEW), "noise": noise, "seeds": list(seeds),
                                     "n_x": N_X, "n_y": N_Y}}


def merge(results: list) -> dict:
    """One :func:`run` result from several (e.g. one per seed, run side by side): per-seed lists joined."""
    out = {"rows": [dict(r) for r in results[0]["rows"]], "config": dict(results[0]["config"])}
    for res in results[1:]:
        out["config"]["seeds"] = out["config"]["seeds"] + res["config"]["seeds"]
        for row, more in zip(out["rows"], res["rows"]):
            for k, v in more.items():
                if isinstance(v, list):
                    row[k] = row[k] + v
    return out


def table(result: dict) -> str:
    """Markdown: one line per row of :func:`run`: sides whose cards were estimated right (of 2 x seeds), then
    value accuracy and prototype R@1 of old / geo / new, mean over the seeds (minimum in brackets)."""
    def mm(v):
        return f"{np.mean(v):.2f} ({np.min(v):.2f})"

    n = len(result["config"]["seeds"])
    out = ["| lattice | caption prior +- | omitted | dim | cards right | values old | values geo | values new | "
           "R@1 old | R@1 geo | R@1 new | s old / new |",
           "|---|---:|---:|---:|---:|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        out.append(f"| {r['shape']} | {r['perturb']:.0%} | {r['omit']:.0%} | {r['dim']} | {sum(r['cards_ok'])}/{2 * n} | "
                   f"{mm(r['old_values'])} | {mm(r['geo_values'])} | {mm(r['new_values'])} | {mm(r['old_protos'])} | "
                   f"{mm(r['geo_protos'])} | {mm(r['new_protos'])} | {np.mean(r['seconds_old']):.0f} / "
                   f"{np.mean(r['seconds_new']):.0f} |")
    return "\n".join(out)


if __name__ == "__main__":
    import json

    res = run()
    print(json.dumps(res))
    print(table(res))


@click.command("lattice-prior", help=__doc__)
@click.option("--seeds", default="0,1,2", show_default=True, help="Comma-separated seeds.")
@click.option("--shape", "shapes", multiple=True, type=click.Choice(["ideal", "generic"]),
              help="Lattice shapes (repeatable; default both).")
@click.option("--noise", type=float, default=0.05, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print only the JSON")
@click.option("--out", default=None, help="also write the JSON here")
def cli(seeds, shapes, noise, as_json, out):
    from eval.experiments import emit

    res = run(tuple(int(s) for s in seeds.split(",")), tuple(shapes) or ("ideal", "generic"), noise=noise)
    emit(res, out, as_json, table(res))
