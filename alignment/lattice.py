"""Pair-free matching of two clouds that show the same attribute lattice on *different* items.

A point matcher (``alignment.pairfree``) pairs rows: it needs the two clouds to cover the same items. When
the images show one set of scenes and the captions a disjoint set (a user with no pairs at all), no row has
a partner, and every point matcher stays at the random rotation's level (docs/results/world.md). What the two
sides still share is the *structure* the theorem predicts for JEPAs with good views: each embedding is an
offset plus one vector per attribute value (an additive lattice; in the world, 6 colours x 2 sizes x 3
columns x 3 rows x 3 backgrounds), the same lattice up to one rotation on both sides, and each value's
frequency in the collection. This matcher uses exactly that, and no pair:

1. **Factorise each side** (:func:`factorize`): in the cloud's leading principal subspace of the lattice's
   dimension (sum of k_a - 1), merge rows into distinct points (vertices; k-means down to the number of
   lattice points when there are more), then label every vertex with one value per attribute so that
   ``vertex ~ offset + sum_a E_a[value_a]`` in least squares.
   The attribute with the most values comes from k-means on the vertices; the others from the directions of
   short vertex-to-vertex differences inside each of its clusters (two vertices that differ in one attribute
   differ by one of that attribute's value differences, so these directions fall into classes; the classes
   of one attribute span its (k-1)-dimensional subspace and are linearly dependent: three values give three
   coplanar differences), then k-means in each attribute's subspace. Every start is polished by alternating
   least squares and exact re-labelling (each vertex against every lattice point) and block moves (re-split
   one attribute with the others fixed); the labelling with the least squared error is kept.
2. **Value frequencies** (:func:`log_prior`): a Poisson log-linear fit of the vertex counts,
   ``log E[count] = c + sum_a theta_a[value_a]``. Unlike raw value frequencies it does not depend on which
   scenes a side happens to contain (it is fitted on the vertices present), so two disjoint collections drawn
   from one skewed prior give the same theta up to noise.
3. **Correspond**: attributes with the same number of values are matched by their sorted theta profiles, and
   the values of each attribute by theta order (the most frequent with the most frequent, ...).
4. **Rotation**: orthogonal Procrustes (with a global scale) between the matched value vectors of the two
   sides, the offsets as the two means: ``x -> (x - offset_x) R s + offset_y``.

Assumptions, checked or stated: the attribute cardinalities (``cards``) are known (a property of the world,
not a pairing); each side shows every value of every attribute; values of one attribute occur at distinct
frequencies (under a uniform prior the lattice's symmetries make the answer unidentifiable, and this matcher
then returns one of the equivalent rotations); the rows of one item lie close together (the vertex step
merges rows within 0.25 x the cloud's RMS radius: the trained world JEPAs' within-scene spread is 0.001 of
their variance, while Gaussian noise of 0.1 per whitened coordinate already breaks it,
``eval.experiments.world_ideal --lattice``). ``score`` is the smaller of the two sides' lattice fit (R^2 of
the vertices under the additive model): near 1 when both clouds are lattices, low when they are not (then the
rotation means nothing, as for a next-token LM's embedding).

Example
-------
>>> from alignment.lattice import ideal_lattice
>>> scenes, E = ideal_lattice((3, 2, 3))
>>> rng = np.random.default_rng(0)
>>> Q = np.linalg.qr(rng.standard_normal((E.shape[1], E.shape[1])))[0]
>>> w = np.prod([[0.5, 0.3, 0.6][a] ** scenes[:, a] for a in range(3)], axis=0)
>>> X = E[rng.choice(len(E), 3000, p=w / w.sum())]
>>> Y = E[rng.choice(len(E), 2000, p=w / w.sum())] @ Q
>>> res = match_lattice(X, Y, (3, 2, 3))
>>> bool(np.allclose(res.rotation.transform(E), E @ Q, atol=1e-3))
True
"""
from __future__ import annotations

import hashlib
import itertools
import time
from collections import OrderedDict

import numpy as np

from alignment.lattice_fit import (  # noqa: F401  (the lattice's API in one place)
    VERTEX_RADIUS,
    LatticeFit,
    factorize,
    log_prior,
    parse_cards,
)


def ideal_lattice(cards) -> tuple[np.ndarray, np.ndarray]:
    """(scenes (S, A) value indices, codes (S, d)) of the full lattice: one-hot codes, centred and whitened
    over the uniform lattice (d = sum(cards) - len(cards)); the theorem's ideal encoder."""
    cards = parse_cards(cards)
    scenes = np.array(list(itertools.product(*[range(k) for k in cards])))
    onehot = np.zeros((len(scenes), sum(cards)))
    off = 0
    for a, k in enumerate(cards):
        onehot[np.arange(len(scenes)), off + scenes[:, a]] = 1.0
        off += k
    C = onehot - onehot.mean(0)
    _, s, Vt = np.linalg.svd(C, full_matrices=False)
    r = int((s > 1e-8 * s[0]).sum())
    return scenes, C @ Vt[:r].T / s[:r] * np.sqrt(len(C))


def correspond(fx: LatticeFit, fy: LatticeFit, cards) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """[(attribute of Y matched to attribute a of X, X's values in theta order, Y's values in the same
    order)] for every attribute a: equal-cardinality attributes paired by their sorted theta profiles."""
    cards = parse_cards(cards)
    best, best_cost = None, np.inf
    for perm in itertools.permutations(range(len(cards))):
        if any(cards[a] != cards[p] for a, p in enumerate(perm)):
            continue
        cost = sum(float(((np.sort(fx.theta[a]) - np.sort(fy.theta[p])) ** 2).sum()) for a, p in enumerate(perm))
        if cost < best_cost:
            best, best_cost = perm, cost
    return [(p, np.argsort(-fx.theta[a], kind="stable"), np.argsort(-fy.theta[p], kind="stable"))
            for a, p in enumerate(best)]


# the last few factorisations, by content: one image cloud matched against several text encoders (the world
# report: five) is factorised once. A factorisation is a deterministic function of its key.
_FITS: OrderedDict = OrderedDict()
_FITS_KEPT = 4


def factorize_cached(Z: np.ndarray, cards, seed: int = 0, radius: float = VERTEX_RADIUS) -> LatticeFit:
    """:func:`factorize`, reusing one of the last few answers for the same array content and options
    (``cards`` as parsed: ``"6,2,3,3,3"`` and ``(6, 2, 3, 3, 3)`` are one key)."""
    Z = np.ascontiguousarray(Z, np.float64)
    cards = parse_cards(cards)
    key = (hashlib.sha256(Z.tobytes()).hexdigest(), Z.shape, cards, int(seed), float(radius))
    if key in _FITS:
        _FITS.move_to_end(key)
        return _FITS[key]
    fit = factorize(Z, cards, seed, radius)
    _FITS[key] = fit
    while len(_FITS) > _FITS_KEPT:
        _FITS.popitem(last=False)
    return fit


def random_correspondence(cards, rng) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """A correspondence in :func:`correspond`'s form drawn at random: equal-cardinality attributes paired
    and values ordered by chance. The lattice matcher's own chance level: whatever the correspondence, its
    rotation maps value vectors onto value vectors, and the cards alone pair the 6-valued attribute with the
    6-valued one, so a random rotation is not its null (on the world the two score alike:
    ``eval.experiments.world_lattice_floor``)."""
    cards = parse_cards(cards)
    perm = list(range(len(cards)))
    for k in set(cards):
        idx = [a for a in range(len(cards)) if cards[a] == k]
        for a, p in zip(idx, rng.permutation(idx)):
            perm[a] = int(p)
    return [(perm[a], rng.permutation(k), rng.permutation(k)) for a, k in enumerate(cards)]


def lattice_rotation(fx: LatticeFit, fy: LatticeFit, corr) -> tuple:
    """(Rotation, value misfit): orthogonal Procrustes with a global scale between the value vectors that
    ``corr`` (:func:`correspond`) matches, offsets as the two lattice centres; the misfit is the share of
    Y's value-vector energy the rotated X values miss."""
    from alignment.procrustes import Rotation, _svd

    P = np.vstack([fx.values[a][ox] for a, (_, ox, _) in enumerate(corr)])
    Q = np.vstack([fy.values[p][oy] for p, _, oy in corr])
    U, s, Vt = _svd(P.T @ Q)
    r = min(len(s), P.shape[1], Q.shape[1])
    R = U[:, :r] @ Vt[:r]
    scale = float(s[:r].sum() / max((P * P).sum(), 1e-30))
    misfit = float(((P @ R * scale - Q) ** 2).sum() / max((Q * Q).sum(), 1e-30))
    rot = Rotation("lattice", fx.offset.astype(np.float32), fy.offset.astype(np.float32), R.astype(np.float32),
                   None, None, scale, {})
    return rot, misfit


def match_lattice(X, Y, cards=None, seed: int = 0, radius: float = VERTEX_RADIUS, **_ignored):
    """The rotation from X's space into Y's through the shared attribute lattice (module docstring).

    Returns a :class:`alignment.matching.MatchResult`: ``rotation`` (an affine isometry up to a global
    scale, ``x -> (x - offset_x) R s + offset_y``), ``perm`` (each X row's first Y row with the same lattice
    point under the correspondence, -1 when Y shows no such point: all -1 for disjoint items), ``score`` (the
    smaller of the two sides' lattice R^2) and ``info`` (both factorisations' fit, theta, the
    correspondence, timings)."""
    from alignment.matching import MatchResult

    t0 = time.perf_counter()
    cards = parse_cards(cards)
    X = np.asarray(X, np.float64)
    Y = np.asarray(Y, np.float64)
    fx = factorize_cached(X, cards, seed, radius)
    t1 = time.perf_counter()
    fy = factorize_cached(Y, cards, seed, radius)
    t2 = time.perf_counter()

    corr = correspond(fx, fy, cards)
    rot, misfit = lattice_rotation(fx, fy, corr)
    # rows: X value combination in Y's attribute order and value names
    yval = np.zeros_like(fx.labels)
    for a, (p, ox, oy) in enumerate(corr):
        to_y = np.empty(cards[a], int)
        to_y[ox] = oy
        yval[:, p] = to_y[fx.labels[:, a]]
    first = {}
    for j, row in enumerate(map(tuple, fy.labels)):
        first.setdefault(row, j)
    perm = np.array([first.get(tuple(v), -1) for v in yval], np.int64)

    def side(f: LatticeFit) -> dict:
        return {"vertices": f.vertices, "r2": round(f.r2, 4), "loss": round(f.loss, 4), "start": f.start,
                "theta": [np.round(t, 3).tolist() for t in f.theta]}

    info = {"cards": list(cards), "x": side(fx), "y": side(fy), "value_misfit": round(misfit, 4),
            "correspondence": [{"y_attribute": int(p), "x_values": ox.tolist(), "y_values": oy.tolist()}
                               for p, ox, oy in corr],
            "seconds": {"factorize_x": round(t1 - t0, 2), "factorize_y": round(t2 - t1, 2),
                        "total": round(time.perf_counter() - t0, 2)}}
    return MatchResult(rot, perm, None, float(min(fx.r2, fy.r2)), info)
