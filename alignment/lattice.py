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
3. **Correspond** (:func:`correspond_geometric`, the default when the cards are estimated): candidate
   correspondences (every pairing of equal-cardinality attributes; per attribute the few value orders whose
   values fit best by a Procrustes of their own, plus the frequency order) are ranked by the misfit of the
   one orthogonal map each implies; among the geometric ties the value frequencies decide (theta, step 2).
   ``correspondence="frequency"`` (the default when ``cards`` is given) keeps the rule before issue 40
   (:func:`correspond`: attributes by sorted theta profiles, values by theta order), which breaks when the
   caption side's prior swaps two values' order. On the ideal lattice (regular simplices) every order ties:
   there only frequencies can tell values apart.
4. **Rotation**: orthogonal Procrustes (with a global scale) between the matched value vectors of the two
   sides, the offsets as the two means: ``x -> (x - offset_x) R s + offset_y``.

Assumptions, checked or stated: the attribute cardinalities (``cards``) are given or, with ``cards=None``,
estimated from each cloud (:func:`estimate_cards`, ``alignment.lattice_cards``: the lattice's subspace, its
attributes and their values, with rows that omit an attribute set aside); each side shows every value of every
attribute; values of one attribute occur at distinct frequencies (under a uniform prior the lattice's symmetries
make the answer unidentifiable, and this matcher then returns one of the equivalent rotations); the rows of one
item lie close together (the vertex step merges rows within 0.25 x the cloud's RMS radius: the trained world
JEPAs' within-scene spread is 0.001 of their variance, while Gaussian noise of 0.1 per whitened coordinate
already breaks it, ``eval.experiments.world_ideal --lattice``). ``score`` is the smaller of the two sides'
lattice fit (R^2 of the vertices under the additive model): near 1 when both clouds are lattices, low when
they are not (then the rotation means nothing, as for a next-token LM's embedding).

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

from alignment.errors import AlignmentError
from alignment.lattice_cards import estimate_cards, lattice_dimension, partial_rows  # noqa: F401
from alignment.lattice_fit import (  # noqa: F401  (the lattice's API in one place)
    MAX_POINTS,
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
    from alignment.procrustes import Rotation, svd

    P = np.vstack([fx.values[a][ox] for a, (_, ox, _) in enumerate(corr)])
    Q = np.vstack([fy.values[p][oy] for p, _, oy in corr])
    U, s, Vt = svd(P.T @ Q)
    r = min(len(s), P.shape[1], Q.shape[1])
    R = U[:, :r] @ Vt[:r]
    scale = float(s[:r].sum() / max((P * P).sum(), 1e-30))
    misfit = float(((P @ R * scale - Q) ** 2).sum() / max((Q * Q).sum(), 1e-30))
    rot = Rotation("lattice", fx.offset.astype(np.float32), fy.offset.astype(np.float32), R.astype(np.float32),
                   None, None, scale, {})
    return rot, misfit


# a candidate ties with the best when its map's misfit (share of Y's value energy) is at most
# GEOMETRY_TIE_FACTOR x the best + GEOMETRY_TIE: the best misfit is the noise level of the two fits, and orders
# that differ by an isometry (the ideal lattice) differ by about that much
GEOMETRY_TIE_FACTOR = 2.0
GEOMETRY_TIE = 0.002
GEOMETRY_TOP = 3       # value orders per attribute pair kept from the per-attribute geometric ranking


def _coords(V: np.ndarray) -> np.ndarray:
    """(k, r) coordinates of the k value vectors ``V`` (k, D) in an orthonormal basis of their span."""
    U, sv, _ = np.linalg.svd(V, full_matrices=False)
    r = int((sv > 1e-9 * max(sv[0], 1e-300)).sum())
    return U[:, :r] * sv[:r]


def _order_residuals(A: np.ndarray, B: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(orders (k!, k), residual (k!,)) of every value order of B against A: the least squared error of
    ``scale A R - B[order]`` over orthogonal R, computed in the values' own span (k x r coordinates)."""
    k = len(A)
    orders = np.array(list(itertools.permutations(range(k))))
    Ac, Bc = _coords(A), _coords(B)
    M = np.einsum("kr,pks->prs", Ac, Bc[orders])                     # (k!, r_a, r_b)
    nuc = np.linalg.svd(M, compute_uv=False).sum(1)
    return orders, scale ** 2 * float((A * A).sum()) + float((B * B).sum()) - 2 * scale * nuc


def correspond_geometric(fx: LatticeFit, fy: LatticeFit, cards, cards_y=None, tie: float = GEOMETRY_TIE,
                         tie_factor: float = GEOMETRY_TIE_FACTOR, top: int = GEOMETRY_TOP) -> tuple[list, dict]:
    """The correspondence (:func:`correspond`'s form) whose single orthogonal map fits the two lattices' value
    vectors best, value frequencies breaking ties.

    Candidates: every pairing of equal-cardinality attributes and, per attribute pair, the ``top`` value
    orders of least per-attribute Procrustes residual (with the global scale of the two lattices' energies)
    plus the frequency order (theta ranks, the old rule). Each candidate's value misfit is that of the one
    orthogonal map (:func:`lattice_rotation`) it implies; the candidates with a misfit of at most
    ``tie_factor`` x the least misfit + ``tie`` are geometric ties, and among them the one whose value
    frequencies agree best (sum of squared theta differences) wins. Where the geometry is symmetric (the
    ideal lattice: every value order of a regular simplex is an isometry) every candidate ties and the answer is the frequency order; where it is not,
    frequencies that disagree between the two sides (a caption prior of its own) cannot outvote it.

    ``cards`` are X's, ``cards_y`` Y's (default the same); both must be the same multiset.
    Returns (correspondence, info: {"misfit", "frequency_cost", "candidates", "ties"})."""
    cards = parse_cards(cards)
    cards_y = parse_cards(cards_y) if cards_y is not None else cards
    if sorted(cards) != sorted(cards_y):
        raise AlignmentError(f"lattice: the two sides' cards differ ({cards} and {cards_y})")
    ex = sum(float((v * v).sum()) for v in fx.values)
    ey = sum(float((v * v).sum()) for v in fy.values)
    scale = float(np.sqrt(ey / max(ex, 1e-300)))
    per: dict = {}
    for a, k in enumerate(cards):
        for b, kb in enumerate(cards_y):
            if kb != k:
                continue
            orders, res = _order_residuals(fx.values[a], fy.values[b], scale)
            keep = [orders[i] for i in np.argsort(res, kind="stable")[:top]]
            # the frequency order: X's values by theta rank matched to Y's by theta rank
            freq = np.empty(k, int)
            freq[np.argsort(-fx.theta[a], kind="stable")] = np.argsort(-fy.theta[b], kind="stable")
            if not any((freq == o).all() for o in keep):
                keep.append(freq)
            per[a, b] = keep
    pairings = [p for p in itertools.permutations(range(len(cards_y)))
                if all(cards_y[p[a]] == k for a, k in enumerate(cards))]
    scored = []
    for p in pairings:
        for choice in itertools.product(*[per[a, p[a]] for a in range(len(cards))]):
            # choice[a][v]: Y's value matched to X's value v of attribute a
            corr = [(p[a], np.arange(k), np.asarray(choice[a])) for a, k in enumerate(cards)]
            _, misfit = lattice_rotation(fx, fy, corr)
            fcost = sum(float(((fx.theta[a] - fy.theta[p[a]][choice[a]]) ** 2).sum()) for a in range(len(cards)))
            scored.append((misfit, fcost, corr))
    best = min(m for m, _, _ in scored)
    ties = [t for t in scored if t[0] <= tie_factor * best + tie]
    misfit, fcost, corr = min(ties, key=lambda t: (t[1], t[0]))
    return corr, {"misfit": round(misfit, 4), "frequency_cost": round(fcost, 4), "candidates": len(scored),
                  "ties": len(ties)}


def _estimate_both(X, Y, seed, max_attrs, max_values) -> tuple[tuple, np.ndarray, np.ndarray, dict]:
    """(cards, X's complete rows, Y's complete rows, info) from :func:`estimate_cards` on each side. Where the
    two estimates differ, the side with the larger share of complete rows (fewer omitted attributes to
    mislead it) decides."""
    cx, ix = estimate_cards(X, max_attrs, max_values, seed)
    cy, iy = estimate_cards(Y, max_attrs, max_values, seed)
    cards = cx if cx == cy or ix["complete"].mean() >= iy["complete"].mean() else cy
    info = {"x": {"cards": list(cx), "dim": ix["dim"], "complete": round(float(ix["complete"].mean()), 4),
                  "candidates": ix["candidates"][:5]},
            "y": {"cards": list(cy), "dim": iy["dim"], "complete": round(float(iy["complete"].mean()), 4),
                  "candidates": iy["candidates"][:5]},
            "agree": cx == cy}
    return cards, ix["complete"], iy["complete"], info


def _set_aside_partial(Z, f: LatticeFit, keep: np.ndarray, cards, seed: int, radius: float) -> tuple:
    """(fit, kept rows, summary) of one side after the omission-aware refit (:func:`partial_rows` from ``f``):
    the side factorised again on the rows at no partial point when they differ from ``keep``."""
    lab = partial_rows(Z, f, cards)
    new_keep = (lab >= 0).all(1)
    summary = {"set_aside": int((~new_keep).sum()),
               "by_attribute": [int((lab[:, a] < 0).sum()) for a in range(len(cards))]}
    if new_keep.sum() > len(cards) and (new_keep != keep).any():
        return factorize_cached(Z[new_keep], cards, seed, radius), new_keep, summary
    return f, keep, summary


def match_lattice(X, Y, cards=None, seed: int = 0, radius: float = VERTEX_RADIUS,
                  correspondence: str | None = None, drop_incomplete: bool | None = None, max_attrs: int = 6,
                  max_values: int = 8, **_ignored):
    """Long: the parameters and the estimated-cards path are documented here. The rotation from X's space into
    Y's through the shared attribute lattice (module docstring).

    Parameters
    ----------
    X : (N1, D1) ; Y : (N2, D2) rows of two modalities, no pairs, possibly of disjoint items
    cards : attribute cardinalities ("6,2,3,3,3" or a sequence); None estimates them from each cloud
        (:func:`estimate_cards`; the tuple both sides agree on, else the one of the side with fewer omissions)
    correspondence : "geometry" (:func:`correspond_geometric`: the candidates' single-map misfit decides,
        value frequencies break ties) or "frequency" (:func:`correspond`: value frequency order only, the
        matcher before issue 40); default "geometry" when ``cards`` is None, "frequency" when it is given
        (callers that pass cards get the answers they got before, bit for bit)
    drop_incomplete : fit each lattice on the rows that sit at one value of every attribute (rows at an
        attribute's mean: an omitted attribute, set aside); default True when ``cards`` is estimated, False
        otherwise. The rows set aside: first the estimate's flags (``info["complete"]`` of
        :func:`estimate_cards`), then those of the omission-aware refit started from that factorisation
        (:func:`alignment.lattice_cards.partial_rows`: rows nearer a partial point, one attribute at its
        centroid, than any lattice point), and the side is factorised again on its complete rows
    max_attrs, max_values : the search space of the estimate (cards=None only)

    Returns a :class:`alignment.matching.MatchResult`: ``rotation`` (an affine isometry up to a global
    scale, ``x -> (x - offset_x) R s + offset_y``), ``perm`` (N1,) (each X row's first Y row with the same
    lattice point under the correspondence, -1 when Y shows no such point or the row was set aside: all -1
    for disjoint items), ``score`` (the smaller of the two sides' lattice R^2) and ``info`` (the cards and how
    they were found, ``partial`` (rows set aside by the omission-aware refit, per side and attribute), both factorisations' fit, theta, the correspondence, ``labels_x`` / ``labels_y`` (N, A)
    each row's fitted values, -1 for rows set aside, timings)."""
    from alignment.matching import MatchResult

    if correspondence is None:
        correspondence = "geometry" if cards is None else "frequency"
    if correspondence not in ("geometry", "frequency"):
        raise AlignmentError(f"lattice: correspondence must be 'geometry' or 'frequency', got {correspondence!r}")
    t0 = time.perf_counter()
    X = np.asarray(X, np.float64)
    Y = np.asarray(Y, np.float64)
    estimated = None
    keep_x, keep_y = np.ones(len(X), bool), np.ones(len(Y), bool)
    if cards is None:
        for Z in (X, Y):
            if Z.ndim != 2 or not np.isfinite(Z).all():
                raise AlignmentError("lattice: expected (N, D) arrays without NaN or inf rows")
        cards, cx, cy, estimated = _estimate_both(X, Y, seed, max_attrs, max_values)
        if drop_incomplete is None or drop_incomplete:
            keep_x, keep_y = cx, cy
    elif drop_incomplete:
        raise AlignmentError("lattice: drop_incomplete needs the estimate's flags: pass cards=None")
    cards = parse_cards(cards)
    te = time.perf_counter()
    fx = factorize_cached(X[keep_x], cards, seed, radius)
    t1 = time.perf_counter()
    fy = factorize_cached(Y[keep_y], cards, seed, radius)
    t2 = time.perf_counter()
    partial = None
    if estimated is not None and (drop_incomplete is None or drop_incomplete) and np.prod(cards) <= MAX_POINTS:
        # the rows set aside are the omission-aware refit's (partial_rows), started from these factorisations;
        # each side is factorised again on its complete rows when they changed
        fx, keep_x, px = _set_aside_partial(X, fx, keep_x, cards, seed, radius)
        fy, keep_y, py = _set_aside_partial(Y, fy, keep_y, cards, seed, radius)
        partial = {"x": px, "y": py}
    t3 = time.perf_counter()

    geometry = None
    if correspondence == "geometry":
        corr, geometry = correspond_geometric(fx, fy, cards)
    else:
        corr = correspond(fx, fy, cards)
    rot, misfit = lattice_rotation(fx, fy, corr)
    # rows: X value combination in Y's attribute order and value names
    yval = np.zeros_like(fx.labels)
    for a, (p, ox, oy) in enumerate(corr):
        to_y = np.empty(cards[a], int)
        to_y[ox] = oy
        yval[:, p] = to_y[fx.labels[:, a]]
    rows_y = np.where(keep_y)[0]
    first = {}
    for j, row in enumerate(map(tuple, fy.labels)):
        first.setdefault(row, int(rows_y[j]))
    perm = -np.ones(len(X), np.int64)
    perm[keep_x] = [first.get(tuple(v), -1) for v in yval]
    labels_x = -np.ones((len(X), len(cards)), int)
    labels_x[keep_x] = fx.labels
    labels_y = -np.ones((len(Y), len(cards)), int)
    labels_y[keep_y] = fy.labels

    def side(f: LatticeFit) -> dict:
        return {"vertices": f.vertices, "r2": round(f.r2, 4), "loss": round(f.loss, 4), "start": f.start,
                "theta": [np.round(t, 3).tolist() for t in f.theta]}

    info = {"cards": list(cards), "cards_estimated": estimated, "correspondence_rule": correspondence,
            "geometry": geometry, "x": side(fx), "y": side(fy), "value_misfit": round(misfit, 4),
            "rows_kept": {"x": int(keep_x.sum()), "y": int(keep_y.sum())}, "partial": partial,
            "correspondence": [{"y_attribute": int(p), "x_values": ox.tolist(), "y_values": oy.tolist()}
                               for p, ox, oy in corr],
            "labels_x": labels_x, "labels_y": labels_y,
            "seconds": {"estimate": round(te - t0, 2), "factorize_x": round(t1 - te, 2),
                        "factorize_y": round(t2 - t1, 2), "partial": round(t3 - t2, 2), "total": round(time.perf_counter() - t0, 2)}}
    return MatchResult(rot, perm, None, float(min(fx.r2, fy.r2)), info)
