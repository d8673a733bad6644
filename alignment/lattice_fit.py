"""Step 1 and 2 of the lattice matcher (:mod:`alignment.lattice`): factorise one cloud into an additive
attribute lattice (:func:`factorize`) and fit its value frequencies (:func:`log_prior`)."""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from math import comb

import numpy as np

from alignment.errors import AlignmentError

VERTEX_RADIUS = 0.25   # rows closer than this x the cloud's RMS radius are one vertex
MAX_VERTICES = 4000    # above this, vertices are reduced by k-means (a cloud that is no lattice)
EDGE_TAUS = (1.1, 1.2, 1.35, 1.5)   # short differences: below tau x the median nearest-vertex distance
EDGE_COS = (0.8, 0.85, 0.9)         # one direction class: |cos| above this to its seed
MAX_EDGES = 3000                    # the shortest differences kept (a lattice has a few hundred)
BIG_STARTS = 25                     # k-means partitions of the attribute with the most values ...
FIRST_STARTS = 5                    # ... of which only the first 5 unless their best labelling explains
MORE_STARTS_R2 = 0.88               # this share of the vertices' variance (a cloud that looks like a lattice)
MAX_POINTS = 100_000               # lattice points (the product of the cards) every vertex is compared with
PAIR_MOVE_STARTS = 3                # the best labellings given pair moves (_pair_moves)
MAX_GROUPINGS = 200_000             # direction-class groupings searched exhaustively up to this count


@dataclass
class LatticeFit:
    """One side's factorisation.

    labels : (N, A) the value of each attribute for every row
    offset : (D,) ; values : A arrays (k_a, D), each summing to zero over its values
    theta : A arrays (k_a,), the log-linear value frequencies (sum to zero)
    r2 : the share of the vertices' variance the additive model explains ; loss : its squared error
    vertices : the number of distinct points ; start : which start gave the kept labelling
    """

    labels: np.ndarray
    offset: np.ndarray
    values: list
    theta: list
    r2: float
    loss: float
    vertices: int
    start: str


def parse_cards(cards) -> tuple[int, ...]:
    """``"6,2,3,3,3"`` or a sequence of ints -> a tuple of cardinalities, each >= 2 (one-line errors)."""
    if isinstance(cards, str):
        try:
            cards = [int(c) for c in cards.replace(" ", "").split(",") if c]
        except ValueError:
            raise AlignmentError(f"lattice: cards must be comma-separated integers such as '6,2,3,3,3', got "
                                 f"{cards!r}") from None
    if cards is None or not len(cards):
        raise AlignmentError("the lattice matcher needs the attribute cardinalities (cards='6,2,3,3,3' for the "
                             "world: colour, size, column, row, background)")
    out = tuple(int(c) for c in cards)
    if min(out) < 2:
        raise AlignmentError(f"lattice: every attribute needs at least 2 values, got cards {out}")
    return out


# ----------------------------------------------------------------------------------------------- design

def design(vals: np.ndarray, cards) -> np.ndarray:
    """(n, 1 + sum(k - 1)): intercept plus sum-to-zero (effect) coding of each attribute's value."""
    cols = [np.ones((len(vals), 1))]
    for a, k in enumerate(cards):
        D = np.zeros((len(vals), k - 1))
        for j in range(k - 1):
            D[:, j] = (vals[:, a] == j).astype(float) - (vals[:, a] == k - 1)
        cols.append(D)
    return np.hstack(cols)


def unpack(coef: np.ndarray, cards) -> tuple[np.ndarray, list]:
    off, values = 1, []
    for k in cards:
        c = coef[off:off + k - 1]
        values.append(np.vstack([c, -c.sum(0, keepdims=True)]))
        off += k - 1
    return coef[0], values


def _fit(C: np.ndarray, cards, vals: np.ndarray) -> tuple[np.ndarray, float]:
    """Least-squares coefficients of ``C ~ design(vals) @ coef`` and the squared error."""
    A = design(vals, cards)
    coef = np.linalg.lstsq(A, C, rcond=None)[0]
    r = C - A @ coef
    return coef, float((r * r).sum())


def all_values(cards) -> np.ndarray:
    return np.array(list(itertools.product(*[range(k) for k in cards])))


# ------------------------------------------------------------------------------------------- clustering

def vertices(Z: np.ndarray, radius: float, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row -> vertex, vertex centroids, counts): greedy leader clustering at ``radius``, two k-means
    rounds to settle; above MAX_VERTICES, k-means to MAX_VERTICES centroids. Rows are visited in
    lexicographic order, so the answer does not depend on the order of the rows (a shuffle)."""
    lab = -np.ones(len(Z), int)
    cents = []
    order = np.lexsort(Z.T[::-1])
    for i in order:
        if lab[i] >= 0:
            continue
        near = (lab < 0) & (((Z - Z[i]) ** 2).sum(1) < radius ** 2)
        lab[near] = len(cents)
        cents.append(Z[near].mean(0))
        if len(cents) > MAX_VERTICES:
            C = Z[order[rng.choice(len(Z), MAX_VERTICES, replace=False)]]
            break
    else:
        C = np.stack(cents)
    for _ in range(2):
        lab = nearest_rows(Z, C)
        cnt = np.bincount(lab, minlength=len(C))
        keep = cnt > 0
        C = np.stack([Z[lab == j].mean(0) for j in np.where(keep)[0]])
    lab = np.unique(nearest_rows(Z, C), return_inverse=True)[1]      # every vertex keeps at least one row
    C = np.stack([Z[lab == j].mean(0) for j in range(lab.max() + 1)])
    return lab, C, np.bincount(lab)


def nearest_rows(Z: np.ndarray, C: np.ndarray, chunk: int = 4096) -> np.ndarray:
    cn = (C * C).sum(1)
    if len(Z) <= chunk:   # the common case (vertices): one block, no list to join
        return np.argmin(cn[None] - 2 * Z @ C.T, 1)
    return np.concatenate([np.argmin(cn[None] - 2 * Z[s:s + chunk] @ C.T, 1) for s in range(0, len(Z), chunk)])


def lattice_kmeans(Z: np.ndarray, k: int, rng, inits: int = 20, iters: int = 60) -> np.ndarray:
    """The best of ``inits`` k-means++ runs (labels; every label used when len(Z) >= k)."""
    best, best_loss = None, np.inf
    n, dim = Z.shape
    for _ in range(inits):
        idx = [int(rng.integers(n))]
        d = ((Z - Z[idx[0]]) ** 2).sum(1)
        for _ in range(k - 1):
            j = int(rng.choice(n, p=d / d.sum())) if d.sum() > 0 else int(rng.integers(n))
            idx.append(j)
            d = np.minimum(d, ((Z - Z[j]) ** 2).sum(1))
        c, lab = Z[idx], None
        for _ in range(iters):
            new = nearest_rows(Z, c)
            if lab is not None and (new == lab).all():
                break
            lab = new
            cnt = np.bincount(lab, minlength=k)
            # per-cluster sums, row order kept (the same sums as np.add.at, several times faster)
            tot = np.bincount((lab[:, None] * dim + np.arange(dim)).ravel(), weights=Z.ravel(),
                              minlength=k * dim).reshape(k, dim)
            c = np.where(cnt[:, None] > 0, tot / np.maximum(cnt, 1)[:, None], c)
        loss = float(((Z - c[lab]) ** 2).sum())
        if loss < best_loss and len(np.unique(lab)) == min(k, n):
            best, best_loss = lab, loss
    return best if best is not None else np.arange(n) % k


# --------------------------------------------------------------------------------------- factorisation

def polish(C, cards, vals, codes, iters: int = 50):
    """Alternate least squares and exact re-labelling (every vertex against every lattice point)."""
    A = design(codes, cards)
    for _ in range(iters):
        coef, loss = _fit(C, cards, vals)
        book = A @ coef
        d2 = (C * C).sum(1)[:, None] - 2 * C @ book.T + (book * book).sum(1)[None]
        new = codes[d2.argmin(1)]
        if (new == vals).all() or any(len(np.unique(new[:, a])) < k for a, k in enumerate(cards)):
            break
        vals = new
    coef, loss = _fit(C, cards, vals)
    return vals, loss


def _leave_out(C, cards, vals, coef, skip) -> np.ndarray:
    """What the vertices ``C`` keep once the fit ``coef`` of every attribute not in ``skip`` is removed."""
    off, values = unpack(coef, cards)
    return C - off - sum(values[o][vals[:, o]] for o in range(len(cards)) if o not in skip)


def _block_moves(C, cards, vals, codes, rng, rounds: int = 10):
    """Re-split one attribute at a time (k-means of what the others leave), keep what lowers the error."""
    coef, loss = _fit(C, cards, vals)
    for _ in range(rounds):
        better = False
        for a, k in enumerate(cards):
            R = _leave_out(C, cards, vals, coef, (a,))
            trial = vals.copy()
            trial[:, a] = lattice_kmeans(R, k, rng, inits=10)
            if len(np.unique(trial[:, a])) < k:
                continue
            c2, l2 = _fit(C, cards, trial)
            if l2 < loss - 1e-9:
                vals, coef, loss, better = trial, c2, l2, True
        v2, l2 = polish(C, cards, vals, codes)
        if l2 < loss - 1e-9:
            vals, loss, better = v2, l2, True
            coef, _ = _fit(C, cards, vals)
        if not better:
            break
    return vals, loss


@functools.lru_cache(maxsize=8)
def _grid(ka: int, kb: int) -> tuple[np.ndarray, np.ndarray]:
    """(cells (K, 2) value pairs of a ka x kb grid, every placement (P, K) of K clusters on its cells, up to
    the grid's own symmetries: value renamings within each attribute give the same fit)."""
    cells = np.array(list(itertools.product(range(ka), range(kb))))
    perms = np.array(list(itertools.permutations(range(len(cells)))), np.int8)
    # the renamings move any cell onto cell (0, 0): the placements with cluster 0 there cover every fit
    return cells, perms[perms[:, 0] == 0]


def _place_on_grid(M: np.ndarray, ka: int, kb: int) -> np.ndarray:
    """(K, 2) the grid cell of each of K = ka kb cluster centroids ``M`` whose placement leaves the least
    squared error under ``cell ~ offset + u[value_a] + w[value_b]`` (the error is a quadratic form in the
    placement: sum_kl H[cell_k, cell_l] <M_k, M_l>, H the residual projector of the grid's design)."""
    cells, perms = _grid(ka, kb)
    A = design(cells, (ka, kb))
    H = np.eye(len(cells)) - A @ np.linalg.pinv(A)
    G = (M - M.mean(0)) @ (M - M.mean(0)).T
    cost = np.zeros(len(perms))
    for k in range(len(cells)):
        for m in range(len(cells)):
            cost += H[perms[:, k], perms[:, m]] * G[k, m]
    return cells[perms[int(cost.argmin())]]


def _pair_moves(C, cards, vals, codes, rng, rounds: int = 5, max_cells: int = 9):
    """Re-split two attributes at once: k-means of what the other attributes leave into k_a x k_b clusters,
    placed on the a x b grid by the best additive fit, then polished; kept when the error drops. Block moves
    re-split one attribute at a time and cannot undo two attributes mixed into each other (a 2-valued and a
    3-valued one sharing their values: each alone looks no worse split otherwise). Pairs of up to
    ``max_cells`` cells ((max_cells - 1)! placements each)."""
    coef, loss = _fit(C, cards, vals)
    pairs = [(a, b) for a, b in itertools.combinations(range(len(cards)), 2) if cards[a] * cards[b] <= max_cells]
    for _ in range(rounds):
        better = False
        for a, b in pairs:
            R = _leave_out(C, cards, vals, coef, (a, b))
            K = cards[a] * cards[b]
            if len(R) < K:
                continue
            lab = lattice_kmeans(R, K, rng, inits=10)
            M = np.stack([R[lab == j].mean(0) if (lab == j).any() else R.mean(0) for j in range(K)])
            cell = _place_on_grid(M, cards[a], cards[b])
            trial = vals.copy()
            trial[:, a], trial[:, b] = cell[lab, 0], cell[lab, 1]
            if any(len(np.unique(trial[:, o])) < cards[o] for o in (a, b)):
                continue
            trial, l2 = polish(C, cards, trial, codes)
            if l2 < loss - 1e-9:
                vals, loss, better = trial, l2, True
                coef, _ = _fit(C, cards, vals)
        if not better:
            break
    return vals, loss


def _direction_classes(C, group, tau_mult, cos_same, limit: int):
    """Unit directions of the short differences between vertices of one group (sign-free), in classes of
    |cos| > ``cos_same`` to a seed; (members, mean direction) largest first, at most ``limit`` classes (of
    the MAX_EDGES shortest differences: a cloud that is no lattice has many)."""
    D = np.sqrt(np.maximum((C * C).sum(1)[:, None] - 2 * C @ C.T + (C * C).sum(1)[None], 0))
    D[group[:, None] != group[None]] = np.inf
    np.fill_diagonal(D, np.inf)
    finite = D.min(1)[np.isfinite(D.min(1))]
    if not len(finite):
        return []
    i, j = np.where(np.triu(D < tau_mult * np.median(finite), 1))
    if len(i) > MAX_EDGES:
        keep = np.argsort(D[i, j], kind="stable")[:MAX_EDGES]
        i, j = i[keep], j[keep]
    U = C[i] - C[j]
    U /= np.maximum(np.linalg.norm(U, axis=1, keepdims=True), 1e-12)
    same = np.abs(U @ U.T) > cos_same
    left = np.ones(len(U), bool)
    out = []
    while left.sum() >= 2 and len(out) < limit:
        count = same[:, left].sum(1)
        count[~left] = -1
        seed = int(count.argmax())
        c = U @ U[seed]
        mem = np.where(left & same[seed])[0]
        if len(mem) < 2:
            break
        m = (U[mem] * np.sign(c[mem])[:, None]).mean(0)
        out.append((len(mem), m / np.linalg.norm(m)))
        left[mem] = False
    return out


def _group_classes(M, cards, slots):
    """Assign direction classes to attributes: attribute a takes k_a (k_a - 1) / 2 classes spanning k_a - 1
    dimensions; the grouping with the least out-of-span energy (exhaustive up to MAX_GROUPINGS)."""
    need = [cards[a] * (cards[a] - 1) // 2 for a in slots]
    count, left = 1, len(M)
    for n in need:
        count *= comb(left, n)
        left -= n
    if count > MAX_GROUPINGS:
        return None

    @functools.lru_cache(maxsize=None)
    def off_span(g, k):
        sv = np.linalg.svd(M[list(g)], compute_uv=False)
        return float((sv[k - 1:] ** 2).sum() / max((sv ** 2).sum(), 1e-12))

    best = [np.inf, None]

    def search(i, remaining, acc, score):
        if score >= best[0]:
            return
        if i == len(slots):
            best[0], best[1] = score, list(acc)
            return
        a = slots[i]
        for g in itertools.combinations(sorted(remaining), need[i]):
            if acc and cards[acc[-1][0]] == cards[a] and g[0] < acc[-1][1][0]:
                continue  # attributes with equal cardinality: each grouping once
            search(i + 1, remaining - set(g), acc + [(a, g)], score + off_span(g, cards[a]))

    search(0, set(range(len(M))), [], 0.0)
    return best[1]


def _edge_start(C, cards, big_labels, tau_mult, cos_same, rng):
    """A labelling from the biggest attribute's partition and the direction classes inside it, or None."""
    slots = sorted((a for a in range(len(cards)) if a != int(np.argmax(cards))), key=lambda a: -cards[a])
    need = sum(cards[a] * (cards[a] - 1) // 2 for a in slots)
    classes = _direction_classes(C, big_labels, tau_mult, cos_same, need)
    if len(classes) < need:
        return None
    M = np.array([m for _, m in classes])
    grouping = _group_classes(M, cards, slots)
    if grouping is None:
        return None
    vals = np.zeros((len(C), len(cards)), int)
    vals[:, int(np.argmax(cards))] = big_labels
    for a, g in grouping:
        B = np.linalg.svd(M[list(g)], full_matrices=False)[2][:cards[a] - 1]
        vals[:, a] = lattice_kmeans(C @ B.T, cards[a], rng, inits=10)
    return vals


def _distinct_points(Z: np.ndarray, cards, radius: float, rng) -> tuple[np.ndarray, np.ndarray]:
    """(row -> vertex, vertices in the principal subspace): the rows merged into distinct points (at most
    one per lattice point), independent of the rows' order."""
    n_par = 1 + sum(k - 1 for k in cards)
    # an additive lattice spans n_par - 1 dimensions: its labels are found in the cloud's leading principal
    # subspace of that size (what lies outside is noise for the lattice), its vectors then in the full space
    Zc = Z - Z.mean(0)
    if Z.shape[1] > n_par - 1:
        V = np.linalg.svd(Zc, full_matrices=False)[2][: n_par - 1]
        # each axis' sign fixed by its largest loading: the SVD's sign is arbitrary and can change with the
        # rows' order, and the vertex and k-means steps visit rows in lexicographic order of these coordinates
        V *= np.sign(V[np.arange(len(V)), np.abs(V).argmax(1)])[:, None]
        Zs = Zc @ V.T
    else:
        Zs = Zc
    rows_v, C, _ = vertices(Zs, radius * float(np.sqrt((Zs * Zs).sum(1).mean())), rng)
    n_points = int(np.prod(cards))
    if len(C) > n_points:   # more distinct points than the lattice has: no lattice at this radius; k-means,
        # on the rows in lexicographic order (k-means++ draws rows by index: a shuffle would change the answer)
        order = np.lexsort(Zs.T[::-1])
        lab = np.empty(len(Zs), int)
        lab[order] = lattice_kmeans(Zs[order], n_points, rng, inits=1, iters=20)
        rows_v = np.unique(lab, return_inverse=True)[1]
        C = np.stack([Zs[rows_v == j].mean(0) for j in range(rows_v.max() + 1)])
    return rows_v, C


def factorize(Z, cards, seed: int = 0, radius: float = VERTEX_RADIUS) -> LatticeFit:
    """Label every row of ``Z`` with one value per attribute (``cards`` values each) so that the vertices
    are an additive lattice in least squares (module docstring, step 1); the log-linear value frequencies
    (step 2) come with it."""
    cards = parse_cards(cards)
    if np.prod(cards, dtype=float) > MAX_POINTS:
        raise AlignmentError(f"lattice: cards {','.join(map(str, cards))} give {int(np.prod(cards, dtype=float)):,} "
                             f"lattice points; at most {MAX_POINTS:,} are supported")
    Z = np.asarray(Z, np.float64)
    if Z.ndim != 2 or not len(Z):
        raise AlignmentError(f"lattice: expected a non-empty (N, D) array, got shape {Z.shape}")
    if not np.isfinite(Z).all():
        raise AlignmentError("lattice: the embeddings contain NaN or inf rows; drop them first")
    rng = np.random.default_rng(seed)
    rms = float(np.sqrt(((Z - Z.mean(0)) ** 2).sum(1).mean()))
    if rms == 0:
        raise AlignmentError("lattice: all rows are identical; there is no lattice to find")
    n_par = 1 + sum(k - 1 for k in cards)
    rows_v, C = _distinct_points(Z, cards, radius, rng)
    if len(C) <= n_par:
        raise AlignmentError(f"lattice: {len(C)} distinct points for a lattice of {n_par} parameters (cards "
                             f"{','.join(map(str, cards))}); this side needs more distinct items")
    codes = all_values(cards)
    big = int(np.argmax(cards))
    done: dict = {}

    def run(name, v):
        if any(len(np.unique(v[:, a])) < k for a, k in enumerate(cards)) or v.tobytes() in done:
            return
        sig = v.tobytes()
        v, loss = polish(C, cards, v, codes)
        v, loss = _block_moves(C, cards, v, codes, rng)
        done[sig] = (name, v, loss)

    spread = float(((C - C.mean(0)) ** 2).sum())
    seen = set()
    for t in range(BIG_STARTS):
        if t == FIRST_STARTS and done and 1 - min(t[2] for t in done.values()) / spread < MORE_STARTS_R2:
            break   # no lattice in sight: more partitions would not make one
        part = lattice_kmeans(C - C.mean(0), cards[big], rng, inits=20 if t == 0 else 1)
        key = frozenset(frozenset(np.where(part == j)[0].tolist()) for j in range(cards[big]))
        if key in seen:
            continue
        seen.add(key)
        for tm in EDGE_TAUS:
            for cs in EDGE_COS:
                v = _edge_start(C, cards, part, tm, cs, rng)
                if v is not None:
                    run(f"edges/k-means {t}/tau {tm}/cos {cs}", v)
    if not done:  # no direction structure: random labellings with the biggest partition
        part = lattice_kmeans(C - C.mean(0), cards[big], rng)
        for r in range(8):
            v = np.stack([rng.integers(0, k, len(C)) for k in cards], 1)
            v[:, big] = part
            run(f"random {r}", v)
    if not done:
        raise AlignmentError("lattice: no labelling uses every value of every attribute; does this side show "
                             f"all {','.join(map(str, cards))} values?")
    Cf = np.stack([Z[rows_v == j].mean(0) for j in range(len(C))])     # the vertices in the full space
    total = float(((Cf - Cf.mean(0)) ** 2).sum())

    def finish(name, v):
        coef, loss = _fit(Cf, cards, v)
        offset, values = unpack(coef, cards)
        labels = v[rows_v]
        return LatticeFit(labels, offset, values, log_prior(labels, cards), 1.0 - loss / max(total, 1e-30), loss,
                          int(len(C)), name)

    # the few best labellings also get pair moves (too slow for every start: 8! placements a 3 x 3 pair)
    for name, v, loss in sorted(done.values(), key=lambda t: t[2])[:PAIR_MOVE_STARTS]:
        v2, l2 = _pair_moves(C, cards, v, codes, rng)
        if l2 < loss - 1e-9:
            v2, l2 = _block_moves(C, cards, v2, codes, rng)
            done[("pairs", v.tobytes())] = (name + "/pairs", v2, l2)   # beside the starts' own entries
    name, v, _ = min(done.values(), key=lambda t: t[2])
    return finish(name, v)


def log_prior(labels: np.ndarray, cards) -> list:
    """theta_a (sum-to-zero, per attribute) of the Poisson log-linear model of the counts of each distinct
    value combination among ``labels`` (N, A): ``log E[count] = c + sum_a theta_a[value_a]`` (IRLS)."""
    cards = parse_cards(cards)
    combos, counts = np.unique(np.asarray(labels), axis=0, return_counts=True)
    A = design(combos, cards)
    beta = np.zeros(A.shape[1])
    beta[0] = np.log(counts.mean())
    for _ in range(100):
        mu = np.exp(np.clip(A @ beta, -50, 50))
        step = np.linalg.solve(A.T @ (A * mu[:, None]) + 1e-6 * np.eye(len(beta)), A.T @ (counts - mu))
        beta += step
        if np.abs(step).max() < 1e-10:
            break
    _, thetas = unpack(beta[:, None], cards)
    return [t[:, 0] for t in thetas]
