"""How many attributes, and how many values each, an unpaired cloud's additive lattice has
(:func:`estimate_cards`), read from the cloud alone: nothing from the world's definition.

The model: ``z = offset + sum_a E_a[value_a] + noise``, the attributes drawn independently (a product prior,
any skew), the lattice spanning ``d = sum_a (k_a - 1)`` dimensions of a possibly larger space. Three steps:

1. **Subspace**: the lattice dimension ``d`` is the largest gap in the log eigenvalues of the covariance (the
   lattice's eigenvalues against the noise floor); when no gap reaches ``GAP`` the whole space is the lattice.
2. **Attributes** (independent subspace analysis): whitened in that subspace, independent attributes are
   independent subspaces, so FastICA's components each fall inside one attribute's subspace, and components
   of one attribute are strongly dependent while those of different attributes are independent. The pairwise
   dependence is the mutual information of the components' quantile bins (bias-corrected); the attributes
   are the groups of an average-linkage tree on it.
3. **Values, and the criterion**: a group of ``m`` components is an attribute of ``m + 1`` values (k values
   span k - 1 dimensions). Every cut of the tree is a candidate cards tuple; each group's rows are labelled
   by k-means into its ``m + 1`` values, and the additive model is fitted to the rows by least squares. The
   kept candidate has the least BIC, ``N d log(RSS / N d) + p log N`` with ``p = d (1 + sum(k - 1))`` (N the
   distinct points); at a fixed ``d`` every candidate has the same ``p``, so this is the least squared error
   of the additive fit, with one rule against splitting: the fewest attributes among the candidates whose
   error is within 1 / ``SPLIT_GAIN`` of the least (a 3-valued attribute fits as two 2-valued ones that never
   show their fourth combination). The search: an exact cover of the axes by groups of least summed k-means
   error (dynamic programming over subsets), then one-move local search (an axis moved, two groups merged)
   on the joint, polished additive error.

Rows that sit at an attribute's mean rather than at one of its values (a caption that omits the attribute)
are flagged in ``info["complete"]``: nearer the centre of the group's value centroids than their own value.
Once a side is factorised, :func:`partial_rows` refits it with omissions in the model (each row at the nearest
lattice point or partial point: one attribute at the centroid of its values) and finds those rows far more
completely; ``alignment.lattice.match_lattice`` sets them aside.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np

from alignment.errors import AlignmentError

GAP = 8.0          # an eigenvalue ratio at least this large separates the lattice from the noise floor
MAX_ROWS = 6000    # rows used (a seeded subset above this): the estimate needs hundreds, not millions
MAX_VERTICES = 400  # distinct points the partition search uses (a seeded subset above this)
LOCAL_ROUNDS = 3    # rounds of one-move local search on the joint additive error
SPLIT_GAIN = 0.8    # fewer attributes win while their error is within 1 / SPLIT_GAIN of the least
# a row is flagged as lacking an attribute when the point with that attribute's component removed is this much
# nearer (squared distance ratio) than its own lattice point: a caption that omits an attribute sits at the
# attribute's mean up to noise (ratio ~0), while a complete row that the additive fit leaves a little off lies
# about as near to both (the trained world JEPAs' clouds: every such ratio 0.36 or more, no omission there)
OMIT_RATIO = 0.25
MERGE_EXPECTED = 5.0  # a missing combination of two attributes counts when independence expects this many
# the most lattice dimensions searched: the exact cover enumerates every group of up to max_values - 1 axes
# (16 axes: 26,333 groups, ~15 s a FastICA start; 42: 3e7, hours). A cloud with no eigenvalue gap below this
# (the next-token model's 64-d rows) is searched in its leading 16 axes
MAX_SEARCH_DIM = 16
# FastICA starts; the candidates of all of them compete on one squared error. The second and third run only
# when the first start's best additive fit explains at least MORE_STARTS_R2 (0.88, factorize's rule) of the
# whitened distinct points: the trained world JEPAs' clouds give 0.95-0.97, the next-token model's 0.83 and
# the untrained encoder's 0.62 (lab seed 0, train split), whose two more starts took 80 s and 22 s for no lattice
ICA_STARTS = 3


def _fastica(W: np.ndarray, rng, iters: int = 300, tol: float = 1e-7) -> np.ndarray:
    """(d, d) orthogonal unmixing of whitened rows ``W`` (N, d): symmetric FastICA, log-cosh contrast."""
    d = W.shape[1]
    B = np.linalg.qr(rng.standard_normal((d, d)))[0]
    for _ in range(iters):
        S = W @ B.T
        g = np.tanh(S)
        B1 = g.T @ W / len(W) - (1 - g * g).mean(0)[:, None] * B
        u, _, vt = np.linalg.svd(B1)
        B1 = u @ vt
        done = np.abs(np.abs((B1 * B).sum(1)) - 1).max() < tol
        B = B1
        if done:
            break
    return B


def _partition_costs(C: np.ndarray, max_size: int, rng) -> dict:
    """{bitmask of components: k-means squared error of the vertices ``C`` (V, d) in those components into
    size + 1 clusters}: the squared error an attribute on exactly those axes leaves (groups up to max_size)."""
    from alignment.lattice_fit import lattice_kmeans

    d = C.shape[1]
    cost = {}
    for m in range(1, min(max_size, d) + 1):
        for g in itertools.combinations(range(d), m):
            Cg = C[:, list(g)]
            lab = lattice_kmeans(Cg, m + 1, rng, inits=3, iters=30)
            cent = np.stack([Cg[lab == j].mean(0) for j in range(m + 1)])
            cost[sum(1 << j for j in g)] = float(((Cg - cent[lab]) ** 2).sum())
    return cost


def _best_cover(cost: dict, d: int, max_groups: int) -> list[list[int]]:
    """The partition of the d components into at most ``max_groups`` groups of least summed cost (exact:
    dynamic programming over subsets, each group containing the lowest component left)."""
    @functools.lru_cache(maxsize=None)
    def f(mask: int, left: int):
        if mask == 0:
            return 0.0, ()
        if left == 0:
            return np.inf, ()
        low, best, sub = mask & -mask, (np.inf, ()), mask
        while sub:
            if sub & low and sub in cost:
                v, rest = f(mask ^ sub, left - 1)
                if cost[sub] + v < best[0]:
                    best = (cost[sub] + v, (sub,) + rest)
            sub = (sub - 1) & mask
        return best

    _, parts = f((1 << d) - 1, max_groups)
    return [[j for j in range(d) if p >> j & 1] for p in parts]


def _additive_error(C, groups, rng) -> tuple[float, np.ndarray]:
    """(squared error, (V, A) labels) of the additive lattice with one attribute of len(g) + 1 values per
    group: each group's vertices labelled by k-means in its axes, then polished jointly in all axes (least
    squares and exact relabelling, ``alignment.lattice_fit``), which absorbs the leakage of imperfectly
    separated axes."""
    from alignment.lattice_fit import all_values, lattice_kmeans, polish

    cards = tuple(len(g) + 1 for g in groups)
    vals = np.stack([lattice_kmeans(C[:, g], k, rng, inits=5) for g, k in zip(groups, cards)], 1)
    if any(len(np.unique(vals[:, a])) < k for a, k in enumerate(cards)):
        return np.inf, vals
    vals, loss = polish(C, cards, vals, all_values(cards))
    return float(loss), vals


def _neighbours(groups: list[list[int]]) -> list[list[list[int]]]:
    """Partitions one move away: one component moved to another group or alone, or two groups merged."""
    out = []
    for a, g in enumerate(groups):
        for j in g:
            rest = [[x for x in h if x != j] for h in groups]
            for b in range(len(groups)):
                if b != a:
                    out.append([h + [j] if i == b else h for i, h in enumerate(rest)])
            if len(g) > 1:
                out.append(rest + [[j]])
    for a, b in itertools.combinations(range(len(groups)), 2):
        out.append([h for i, h in enumerate(groups) if i not in (a, b)] + [groups[a] + groups[b]])
    return [[sorted(h) for h in p if h] for p in out]


def _merge_dependent(C, groups, rng) -> list[list[int]]:
    """``groups`` with every pair of attributes that is one attribute split in two merged: the additive model
    draws attributes independently, so two attributes of m_a and m_b axes whose values occur together in only
    m_a + m_b + 1 of their (m_a + 1)(m_b + 1) combinations, each missing combination expected at least
    ``MERGE_EXPECTED`` times from the two attributes' own frequencies, are one attribute of m_a + m_b + 1
    values (a 3-valued attribute fits as two 2-valued ones that never show their fourth combination, at the
    same squared error, so the error alone cannot tell them apart)."""
    groups = [list(g) for g in groups]
    while len(groups) > 1:
        loss, vals = _additive_error(C, groups, rng)
        if not np.isfinite(loss):
            return groups
        merged = False
        for a, b in itertools.combinations(range(len(groups)), 2):
            ka, kb = len(groups[a]) + 1, len(groups[b]) + 1
            table = np.zeros((ka, kb))
            np.add.at(table, (vals[:, a], vals[:, b]), 1)
            expected = np.outer(table.sum(1), table.sum(0)) / len(vals)
            empty = table == 0
            if empty.sum() == (ka - 1) * (kb - 1) and (expected[empty] >= MERGE_EXPECTED).all():
                groups = [g for i, g in enumerate(groups) if i not in (a, b)] + [sorted(groups[a] + groups[b])]
                merged = True
                break
        if not merged:
            return groups
    return groups


def _label_groups(S, groups, rng):
    """(N, A) k-means labels of each group's rows into len(group) + 1 values, and the A centroid arrays."""
    from alignment.lattice_fit import lattice_kmeans

    labels, cents = [], []
    for g in groups:
        Sg = S[:, g]
        lab = lattice_kmeans(Sg, len(g) + 1, rng, inits=8)
        labels.append(lab)
        cents.append(np.stack([Sg[lab == j].mean(0) for j in range(len(g) + 1)]))
    return np.stack(labels, 1), cents


def _complete_rows(S: np.ndarray, cards, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """((N,) bool, (N, A) labels relabelled by the joint fit): False for a row that lacks an attribute's
    component, i.e. whose lattice point with one attribute's value vector replaced by the attribute's mean (zero
    in the sum-to-zero coding) is nearer than ``OMIT_RATIO`` x (squared) its own lattice point. The additive fit is in all axes, so leakage between groups does not matter."""
    from alignment.lattice_fit import all_values, design, nearest_rows, unpack

    codes = all_values(cards)
    for _ in range(3):   # the groups' k-means labels, relabelled to the nearest point of the joint fit
        coef = np.linalg.lstsq(design(labels, cards), S, rcond=None)[0]
        labels = codes[nearest_rows(S, design(codes, cards) @ coef)]
    coef = np.linalg.lstsq(design(labels, cards), S, rcond=None)[0]
    offset, values = unpack(coef, cards)
    fit = offset + sum(values[a][labels[:, a]] for a in range(len(cards)))
    own = ((S - fit) ** 2).sum(1)
    omit = np.min([((S - fit + values[a][labels[:, a]]) ** 2).sum(1) for a in range(len(cards))], axis=0)
    return omit >= OMIT_RATIO * own, labels


def _search(Wv: np.ndarray, d: int, max_attrs: int, max_values: int, rng) -> tuple[dict, list]:
    """({(start, groups): additive error}, FastICA bases): the partitions of each start's components tried by
    the exact cover and the one-move local search, over ``ICA_STARTS`` FastICA starts on the whitened distinct
    points ``Wv``; the squared errors compare across starts (each basis is a rotation of the same points)."""
    from alignment.lattice_fit import MORE_STARTS_R2

    tried, bases = {}, []
    total = float((Wv ** 2).sum())
    for start in range(ICA_STARTS):   # FastICA from several random starts: the squared errors compare across
        if start and 1 - min(tried.values()) / total < MORE_STARTS_R2:
            break   # no lattice in sight (factorize's rule): more starts would not make one, and cost minutes
        B = _fastica(Wv, rng)         # them (each basis is a rotation of the same whitened points)
        bases.append(B)
        C = Wv @ B.T
        groups = _best_cover(_partition_costs(C, max_values - 1, rng), d, max_attrs)
        loss, _ = _additive_error(C, groups, rng)
        tried[(start, tuple(map(tuple, sorted(groups))))] = loss
        for _ in range(LOCAL_ROUNDS):      # local search on the joint additive error
            better = False
            for cand in _neighbours(groups):
                key = (start, tuple(map(tuple, sorted(cand))))
                if key in tried or len(cand) > max_attrs or max(len(h) for h in cand) + 1 > max_values:
                    continue
                tried[key] = _additive_error(C, cand, rng)[0]
                if tried[key] < loss * (1 - 1e-6):
                    groups, loss, better = [list(h) for h in cand], tried[key], True
            if not better:
                break
    return tried, bases


def lattice_dimension(Z: np.ndarray, max_dim: int | None = None, gap: float = GAP) -> tuple[int, np.ndarray]:
    """(d, eigenvalues): the number of leading principal axes above the largest log-eigenvalue gap of at
    least ``gap`` (the whole space, capped at ``max_dim``, when there is none). ``Z`` (N, D)."""
    Zc = Z - Z.mean(0)
    ev = np.linalg.svd(Zc, compute_uv=False) ** 2 / len(Z)
    cap = min(len(ev), max_dim or len(ev))
    ev = np.maximum(ev, ev[0] * 1e-12)
    ratio = ev[: cap - 1] / ev[1:cap] if cap < len(ev) else ev[: cap - 1] / ev[1:cap]
    if cap < len(ev):     # the gap right after the cap counts too (a lattice of exactly max_dim dimensions)
        ratio = np.append(ratio, ev[cap - 1] / ev[cap])
    if len(ratio) and ratio.max() >= gap:
        return int(ratio.argmax()) + 1, ev
    return cap, ev


def whitening(X: np.ndarray, eps: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, W)`` with ``(X - mean) @ W`` of identity covariance (ZCA; eigenvalues floored at ``eps``)."""
    X = np.asarray(X, np.float64)
    mu = X.mean(0)
    w, V = np.linalg.eigh((X - mu).T @ (X - mu) / len(X))
    return mu, V @ np.diag(1.0 / np.sqrt(np.maximum(w, eps))) @ V.T


def view_basis(A: np.ndarray, B: np.ndarray, eps: float = 1e-6) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mean (D,), P (D, D), eigenvalues (D,))``: the directions along which one view of an item predicts the
    other, best first. ``A``, ``B``: (n, D) embeddings of two views of the same n items in *one* modality (a
    JEPA's own training pairs: no cross-modal pair). Both are centred on their joint mean and whitened by their
    joint covariance; the eigenvalues of the symmetrised cross-covariance are the cross-view correlations.
    Project with ``(X - mean) @ P[:, :k]`` (unit variance, uncorrelated columns)."""
    A, B = np.asarray(A, np.float64), np.asarray(B, np.float64)
    if A.shape != B.shape or A.ndim != 2 or len(A) < 2:
        raise AlignmentError(f"view_basis: the two views must be (n, D) arrays of one shape with n >= 2, got "
                             f"{A.shape} and {B.shape}")
    mu, W = whitening(np.concatenate([A, B]), eps)                      # joint mean and covariance
    Aw, Bw = (A - mu) @ W, (B - mu) @ W
    lam, U = np.linalg.eigh((Aw.T @ Bw + Bw.T @ Aw) / (2 * len(A)))
    order = np.argsort(lam)[::-1]
    return mu, W @ U[:, order], lam[order]


def view_dimension(lam: np.ndarray, m: int = 24, n_pairs: int | None = None) -> int:
    """The view subspace's size: where the ratio of a leading view eigenvalue to the next is largest (among the
    leading ``m``; the whole space when it has a single direction). With ``n_pairs`` (the pairs the eigenvalues
    came from) a cross-view correlation below ``4 / sqrt(n_pairs)`` (what unrelated views show by chance) is
    no shared direction: the subspace ends before it, and it does not divide. On the 32-d world JEPAs (every
    leading eigenvalue 0.5-0.8) it reads the lattice's 12 on every side; on 12-d ones, whose lattice fills the
    space, it has no gap to read (1-11)."""
    lam = np.asarray(lam, np.float64)
    floor = 4.0 / np.sqrt(n_pairs) if n_pairs else 1e-12
    m = min(m, len(lam) - 1, max(1, int((lam > floor).sum())))
    return int(np.argmax(lam[:m] / np.maximum(lam[1:m + 1], floor))) + 1 if len(lam) > 1 else len(lam)


def in_view_subspace(Z: np.ndarray, views) -> np.ndarray:
    """``Z`` (N, D) projected onto the view subspace of ``views`` = (A, B), two views of the same items in Z's
    modality (``view_basis``; its size by ``view_dimension``): (N, k), whitened."""
    mu, P, lam = view_basis(*views)
    if P.shape[0] != Z.shape[1]:
        raise AlignmentError(f"estimate_cards: the views are {P.shape[0]}-d, the cloud {Z.shape[1]}-d; give two "
                             "views embedded by the cloud's own encoder")
    return (Z - mu) @ P[:, :view_dimension(lam, n_pairs=len(views[0]))]


def estimate_cards(Z, max_attrs: int = 6, max_values: int = 8, seed: int = 0, views=None) -> tuple[tuple, dict]:
    """Estimate the attribute cardinalities of the additive lattice one unpaired cloud shows (module docstring).

    Parameters
    ----------
    Z : (N, D) rows of one modality, any order; the lattice may occupy a subspace of R^D
    max_attrs : the most attributes considered (candidates with more groups are skipped)
    max_values : the most values one attribute may have (a group of more components is not an attribute)
    seed : seeds FastICA, k-means and the row subset
    views : optional (A, B), two views of the same items in Z's modality (the encoder's training pairs): the
        lattice is read in their view subspace (``in_view_subspace``), for an embedding wider than its lattice

    Returns
    -------
    cards : tuple of ints, largest first (the order of attributes is not identifiable from one cloud)
    info : dict with ``dim`` (the lattice dimension d), ``starts`` (FastICA starts run: ``ICA_STARTS``, or 1 when
        the first found no lattice), ``eigenvalues`` (leading 2d), ``candidates`` ([{"cards", "bic"}] per cut),
        ``groups`` (components per attribute), ``complete`` ((N,) bool: False for rows at an attribute's mean),
        ``labels`` ((N, A) rows' k-means values per attribute, ``cards`` order), ``view_k`` (with ``views``)
    """
    Z = np.asarray(Z, np.float64)
    if Z.ndim != 2 or len(Z) < 10:
        raise AlignmentError(f"estimate_cards: expected an (N, D) array with N >= 10, got shape {Z.shape}")
    if views is not None:
        cards, info = estimate_cards(Zv := in_view_subspace(Z, views), max_attrs, max_values, seed)
        return cards, {**info, "view_k": Zv.shape[1]}
    if not np.isfinite(Z).all():
        raise AlignmentError("estimate_cards: the embeddings contain NaN or inf rows; drop them first")
    rng = np.random.default_rng(seed)
    d, ev = lattice_dimension(Z, min(max_attrs * (max_values - 1), MAX_SEARCH_DIM))
    mu = Z.mean(0)
    _, s, Vt = np.linalg.svd(Z - mu, full_matrices=False)
    V = Vt[:d]
    V *= np.sign(V[np.arange(d), np.abs(V).argmax(1)])[:, None]   # SVD signs fixed: row-order free answer
    P = (Z - mu) @ V.T                                               # (N, d) the lattice subspace
    W = P / np.sqrt(ev[:d])                                          # whitened
    fit_rows = np.arange(len(Z)) if len(Z) <= MAX_ROWS else np.sort(rng.choice(len(Z), MAX_ROWS, replace=False))
    # the distinct points (rows of one item merged), at most MAX_VERTICES of them for the search. The
    # attributes are read off these, each distinct point once: a skewed prior repeats a few items thousands of
    # times, and on the rows themselves FastICA and the fit see those few items only (the trained world
    # JEPAs' clouds: 89 and 60 distinct scenes under 6,000 and 5,000 rows; rows gave wrong cards on both)
    from alignment.lattice_fit import VERTEX_RADIUS, vertices

    _, C0, _ = vertices(W[fit_rows], VERTEX_RADIUS * float(np.sqrt((W ** 2).sum(1).mean())), rng)
    if len(C0) > MAX_VERTICES:
        C0 = C0[np.sort(rng.choice(len(C0), MAX_VERTICES, replace=False))]
    if len(C0) <= d + 1:
        raise AlignmentError(f"estimate_cards: {len(C0)} distinct points in {d} lattice dimensions, too few to "
                             "estimate the attributes from; give this side more distinct items, or give the "
                             "cards (match_lattice(cards=...), `captioner align fit --cards 6,2,3,3,3`)")
    cm = C0.mean(0)
    evv, U = np.linalg.eigh(np.atleast_2d(np.cov(C0 - cm, rowvar=False, bias=True)))   # (1, 1) for one axis
    T = U / np.sqrt(np.maximum(evv, evv.max() * 1e-9))               # whitening of the distinct points
    Wv = (C0 - cm) @ T
    tried, bases = _search(Wv, d, max_attrs, max_values, rng)
    # more attributes must explain clearly more: a k-valued attribute split into two fits as well (three of a
    # 2 x 2 grid's four corners fit any triangle) and predicts a lattice point never seen. Kept: the fewest
    # attributes among the candidates within 1 / SPLIT_GAIN of the least error, the least error among those
    least = min(tried.values())
    start, key = min((k for k, v in tried.items() if v <= least / SPLIT_GAIN),
                     key=lambda k: (len(k[1]), tried[k]))
    C = Wv @ bases[start].T
    groups = _merge_dependent(C, [list(h) for h in key], rng)
    S = ((W - cm) @ T) @ bases[start].T                               # (N, d) every row's components
    n = len(C)

    def bic(err):
        return n * d * np.log(max(err, 1e-300) / (n * d)) + d * (1 + d) * np.log(n)

    candidates = sorted(({"cards": sorted((len(h) + 1 for h in k), reverse=True), "bic": round(float(bic(v)), 1)}
                         for (_, k), v in tried.items() if np.isfinite(v)), key=lambda c: c["bic"])[:10]
    cards = tuple(len(g) + 1 for g in groups)
    order = sorted(range(len(groups)), key=lambda a: (-cards[a], groups[a]))
    groups = [groups[a] for a in order]
    cards = tuple(cards[a] for a in order)
    labels, _ = _label_groups(S, groups, rng)
    complete, labels = _complete_rows(S, cards, labels)
    info = {"dim": int(d), "starts": len(bases), "eigenvalues": np.round(ev[: 2 * d], 4).tolist(), "candidates": candidates,
            "groups": groups, "complete": complete, "labels": labels}
    return cards, info


PARTIAL_ITERS = 30   # rounds of the omission-aware refit (partial_rows); it settles in a handful


def partial_labels(cards) -> np.ndarray:
    """(M, A) the value combinations of every lattice point and every *partial* point (one attribute at the
    centroid of its values: label -1), e.g. 324 + 540 rows for cards 6,2,3,3,3."""
    from alignment.lattice_fit import all_values

    cards = tuple(cards)
    return np.vstack([all_values(cards)] + [np.insert(all_values(cards[:a] + cards[a + 1:]), a, -1, axis=1)
                                            for a in range(len(cards))])


def _points(L: np.ndarray, offset: np.ndarray, values: list) -> np.ndarray:
    """(M, D) the points of the combinations ``L`` (a -1 label adds nothing: the attribute at its centroid)."""
    return offset + sum(np.where(L[:, [a]] >= 0, values[a][np.maximum(L[:, a], 0)], 0.0) for a in range(L.shape[1]))


def partial_points(offset: np.ndarray, values: list, cards) -> tuple[np.ndarray, np.ndarray]:
    """(P (M, D), labels (M, A)): every point of the lattice (``offset`` + one value vector per attribute) and
    every partial point (:func:`partial_labels`; zero in the sum-to-zero coding for the attribute left out)."""
    L = partial_labels(cards)
    return _points(L, offset, values), L


def partial_rows(Z, fit, cards, iters: int = PARTIAL_ITERS) -> np.ndarray:
    """(N, A) each row's values, -1 for an attribute the row leaves out: the rows of a caption that omits an
    attribute sit at the centroid of that attribute's values (a text JEPA trained on such captions puts them
    there: the best prediction of a caption that names no colour is the colours' mean), not at a value.

    An omission-aware refit started from ``fit`` (factorize's labelling): every row goes to the nearest of
    the lattice's points and its partial points (:func:`partial_points`), then the offset and the value
    vectors are refitted by least squares with each row's omitted attribute at its centroid, until no label
    moves. The start matters: on the world's 20 %-omission captions a start from the estimate's k-means labels
    (right for 51-96 % of the complete rows by attribute) settled with 2-6 % of complete captions set aside,
    the start from factorize's fit with 0 % and 99.8 % of the omitting ones found (seed 1, docs/results/world.md).
    A lattice with no omission loses few rows (0.2-0.7 % of the world's renders, seeds 0-2, the background
    flagged; 0-0.1 % of complete captions)."""
    from alignment.lattice_fit import design, nearest_rows, parse_cards, unpack

    Z = np.asarray(Z, np.float64)
    cards = parse_cards(cards)
    L = partial_labels(cards)
    offset, values = fit.offset, fit.values
    labels = None
    for _ in range(iters):
        new = L[nearest_rows(Z, _points(L, offset, values))]
        if labels is not None and (new == labels).all():
            break
        labels = new
        coef = np.linalg.lstsq(design(labels, cards), Z, rcond=None)[0]
        offset, values = unpack(coef, cards)
    return labels
