"""Can a pair-free rotation be found between two embedding clouds? Signals measured before matching, and a
plain verdict.

Schnaus et al. ("Shared Geometry as a Rosetta Stone", 2026) find that pair-free quality follows the two
encoders' linear CKA on paired data; with no pairs that number is not available, so the unpaired verdict
rests on signals that need none:

| signal | what it is | pairs? |
| --- | --- | --- |
| ``cka`` / ``unbiased_cka`` / ``mutual_knn`` | the alignment of the paired rows, with a permutation null | yes |
| ``spectrum`` | overlap (1 - total variation) of the two normalised, sorted PCA spectra (top ``dim``) | no |
| ``distances`` | 1 - Kolmogorov-Smirnov distance between the two distributions of pairwise cosine distances, each divided by its median (rotation and scale invariant) | no |
| ``knn_graph`` | 1 - KS distance between the two distributions of a point's k-NN distance ratio d_1 / d_k (local density shape) | no |
| ``stability`` | the matcher run on ``restarts`` bootstrap subsamples of both sides: mean cosine between the directions each answer maps the same X rows to (1: the same rotation every time; ~0: unrelated rotations) | no |
| ``surrogate_margin`` | the matched cosine of the matcher's answer on (X, Y) minus the same on (X, a Gaussian cloud with Y's spectrum): structure the matcher locks onto beyond what a spectrum alone gives; the matched cosine (:func:`matched_cosine`) is the mean cosine of the Hungarian assignment between the mapped X and Y, the same for every matcher; when a side repeats points (the JEPA world's scenes), both scores are taken between distinct points and the surrogate repeats its points as Y does | no |

The verdict is "feasible" when the bootstrap answers agree (``stability`` >= ``STABLE``) and the matcher's
score stands above the surrogate (``surrogate_margin`` >= ``MARGIN``); with pairs, "feasible" also needs the
paired signals' verdict (unbiased CKA >= ``CKA_OK``). The thresholds were set on the synthetic cases of
``validation_cases`` (see docs/results/pairfree-real.md for the table that tests them).

Pure math: arrays in, dicts out.
"""
from __future__ import annotations

import numpy as np

from alignment._checks import as_matrix
from alignment.errors import AlignmentError

STABLE = 0.25  # bootstrap answers must agree at least this much (mean cosine of the mapped directions)
MARGIN = 0.03  # the matched cosine of the answer must beat the one on a spectrum-only surrogate by this much
CKA_OK = 0.6  # unbiased CKA from which the paired signal calls a pair-free match feasible (Schnaus et al.: 0.66 works, 0.47 fails)


def check_clouds(X, Y, clusters: int = 0):
    """Validate two clouds for diagnosis: finite, same-dimensional or not, enough distinct rows.

    Raises AlignmentError (one line) for NaN rows, all-identical rows, or fewer rows than ``clusters``."""
    X = as_matrix(X, "image cloud", min_rows=4)
    Y = as_matrix(Y, "text cloud", min_rows=4)
    for name, Z in (("image cloud", X), ("text cloud", Y)):
        if np.ptp(Z, axis=0).max() == 0:
            raise AlignmentError(f"{name}: all {len(Z)} rows are identical; there is no geometry to match")
        if clusters and len(Z) < clusters:
            raise AlignmentError(f"{name}: {len(Z)} rows are fewer than the {clusters} clusters asked for")
    return X, Y


def _unit_centred(Z):
    Z = np.asarray(Z, np.float64)
    Z = Z - Z.mean(0)
    return Z / np.maximum(np.linalg.norm(Z, axis=1, keepdims=True), 1e-12)


def spectrum_overlap(X, Y, dim: int = 64) -> float:
    """1 - total variation between the normalised top-``dim`` PCA spectra of X and Y (1: identical shapes)."""
    def spec(Z):
        s = np.linalg.svd(_unit_centred(Z), compute_uv=False) ** 2
        s = s[:dim]
        return np.pad(s / s.sum(), (0, dim - len(s)))

    return float(1 - 0.5 * np.abs(spec(X) - spec(Y)).sum())


def _ks(a, b) -> float:
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    return float(np.abs(np.searchsorted(a, grid, "right") / len(a) - np.searchsorted(b, grid, "right") / len(b)).max())


def _pair_dists(Z, n: int, seed: int) -> np.ndarray:
    U = _unit_centred(Z)
    rng = np.random.default_rng(seed)  # the same draws on both sides (the same pairs when N is equal)
    i, j = rng.integers(0, len(U), n), rng.integers(0, len(U), n)
    keep = i != j
    d = 1 - (U[i[keep]] * U[j[keep]]).sum(1)
    return d / max(float(np.median(d)), 1e-12)


def distance_agreement(X, Y, n: int = 20000, seed: int = 0) -> float:
    """1 - KS distance between the median-scaled pairwise cosine-distance distributions of X and Y."""
    return 1 - _ks(_pair_dists(X, n, seed), _pair_dists(Y, n, seed))


def _knn_ratio(Z, k: int) -> np.ndarray:
    from alignment.metrics import knn_indices

    U = _unit_centred(Z)
    idx = knn_indices(U, k)
    d = 1 - np.take_along_axis(U @ U.T, idx, 1) if len(U) <= 4096 else 1 - np.einsum("nd,nkd->nk", U, U[idx])
    return d[:, 0] / np.maximum(d[:, -1], 1e-12)


def knn_graph_agreement(X, Y, k: int = 10) -> float:
    """1 - KS distance between the distributions of the k-NN distance ratio d_1 / d_k on each side."""
    k = min(k, len(X) - 1, len(Y) - 1)
    return 1 - _ks(_knn_ratio(X, k), _knn_ratio(Y, k))


DUPLICATE_RADIUS = 0.02  # rows this close (x the cloud's RMS radius, per coordinate cell) are one point


def _repeated_points(Y) -> tuple[np.ndarray, np.ndarray]:
    """(row -> distinct point, the distinct points (means)): rows in one grid cell of side DUPLICATE_RADIUS x
    the cloud's RMS radius are one point (several renders of one scene, one caption said twice)."""
    Yc = Y - Y.mean(0)
    rms = float(np.sqrt((Yc ** 2).sum(1).mean()))
    cell = np.floor(Yc / max(DUPLICATE_RADIUS * rms, 1e-12)).astype(np.int64)
    _, group = np.unique(cell, axis=0, return_inverse=True)
    group = group.ravel()
    cnt = np.bincount(group)
    means = np.zeros((len(cnt), Y.shape[1]))
    np.add.at(means, group, Y)
    return group, means / cnt[:, None]


def _gaussian_surrogate(Y, rng, repeats=None) -> np.ndarray:
    """A Gaussian cloud with Y's mean and covariance: Y's spectrum, none of its structure. When Y repeats
    points (rows merged by ``_repeated_points``; ``repeats``: its answer for Y when already known), the
    Gaussian is drawn for its distinct points and each is repeated as often as in Y, with Y's own small
    offsets: the matcher's mutual-NN score is low among repeated points whatever the rotation, so a surrogate
    without repeats would score higher for that reason alone (the JEPA world: renders and captions of ~100
    scenes, each many times)."""
    Y = np.asarray(Y, np.float64)
    group, means = _repeated_points(Y) if repeats is None else repeats
    if len(means) == len(Y):           # no repeats: the plain surrogate
        Yc = Y - Y.mean(0)
        _, s, Vt = np.linalg.svd(Yc, full_matrices=False)
        G = rng.standard_normal((len(Y), len(s))) * (s / np.sqrt(len(Y)))
        return (G @ Vt + Y.mean(0)).astype(np.float32)
    w = np.bincount(group).astype(np.float64)
    mu = (w[:, None] * means).sum(0) / w.sum()
    Mc = (means - mu) * np.sqrt(w / w.sum())[:, None]          # the rows' spectrum, carried by the points
    _, s, Vt = np.linalg.svd(Mc, full_matrices=False)
    G = rng.standard_normal((len(means), len(s))) * s
    return ((G @ Vt + mu)[group] + (Y - means[group])).astype(np.float32)


def _mapped_directions(rot, Xq) -> np.ndarray:
    Z = np.asarray(rot.transform(Xq), np.float64)
    Z = Z - np.asarray(rot.mean_y, np.float64)
    return Z / np.maximum(np.linalg.norm(Z, axis=1, keepdims=True), 1e-12)


def matched_cosine(rot, X, Y, sample: int = 2000, seed: int = 0) -> float:
    """How well a rotation lays X (N1, D1) onto Y (N2, D2) with no pair: both sides centred and their rows
    L2-normalised after mapping, the mean cosine of the Hungarian assignment between the mapped X and Y (at
    most ``sample`` random rows a side). 1 for an exact rotation of the same points; between disjoint sets,
    the cosine of matched neighbours. Comparable between matchers, which each score their answers their own
    way; the diagnosis compares it with the same score on a spectrum-only surrogate."""
    from alignment.rosetta import lap

    M = _unit_centred(np.asarray(rot.transform(X), np.float64))
    U = _unit_centred(Y)
    rng = np.random.default_rng(seed)
    M, U = M[rng.permutation(len(M))[:sample]], U[rng.permutation(len(U))[:sample]]
    r, c = lap(M, U)
    return float((M[r] * U[c]).sum(1).mean())


def matcher_signals(X, Y, restarts: int = 3, frac: float = 0.8, seed: int = 0, matcher=None) -> dict:
    """Bootstrap stability of the matcher's rotation and its margin over a spectrum-only surrogate.

    ``matcher``: a name of :data:`alignment.pairfree.MATCHERS` (default "auto", the product's pair-free
    matcher) or a callable ``matcher(X, Y, seed) -> MatchResult``. Both scores are :func:`matched_cosine`,
    whatever the matcher reports."""
    if matcher is None or isinstance(matcher, str):
        from alignment.pairfree import match

        method = matcher or "auto"

        def matcher(A, B, s):
            return match(A, B, method=method, seed=s)

    rng = np.random.default_rng(seed)
    nx, ny = max(4, int(frac * len(X))), max(4, int(frac * len(Y)))
    dirs, scores = [], []
    for r in range(restarts):
        xi = rng.choice(len(X), nx, replace=False)
        yi = rng.choice(len(Y), ny, replace=False)
        res = matcher(X[xi], Y[yi], r)
        dirs.append(_mapped_directions(res.rotation, X))
        scores.append(float(res.score))
    cos = [float((dirs[a] * dirs[b]).sum(1).mean()) for a in range(restarts) for b in range(a + 1, restarts)]
    _, mx = _repeated_points(X)
    rep_y = _repeated_points(Y)
    my = rep_y[1]
    S = _gaussian_surrogate(Y, rng, rep_y)
    sur = matcher(X, S, restarts)
    full = matcher(X, Y, restarts + 1)
    if len(mx) < len(X) or len(my) < len(Y):
        # repeated points: the assignment among copies is a coin toss whatever the rotation, so both scores are
        # taken between the distinct points (the surrogate repeats its points as Y does)
        s_full = matched_cosine(full.rotation, mx, my, seed=seed)
        s_sur = matched_cosine(sur.rotation, mx, _repeated_points(S)[1], seed=seed)
    else:
        s_full, s_sur = matched_cosine(full.rotation, X, Y, seed=seed), matched_cosine(sur.rotation, X, S, seed=seed)
    return {"stability": float(np.mean(cos)) if cos else float("nan"), "matcher_score": s_full,
            "surrogate_score": s_sur, "surrogate_margin": s_full - s_sur, "bootstrap_scores": scores,
            "distinct_points": [int(len(mx)), int(len(my))]}


def unpaired_signals(X, Y, restarts: int = 3, dim: int = 64, seed: int = 0, matcher=None) -> dict:
    """Every signal that needs no pair (see the module table)."""
    X, Y = check_clouds(X, Y)
    out = {"spectrum": spectrum_overlap(X, Y, dim), "distances": distance_agreement(X, Y, seed=seed),
           "knn_graph": knn_graph_agreement(X, Y)}
    out.update(matcher_signals(X, Y, restarts=restarts, seed=seed, matcher=matcher))
    return out


def paired_signals(X, Y, n_perm: int = 20, k: int = 10, seed: int = 0) -> dict:
    """CKA, unbiased CKA and mutual k-NN of paired rows, each with its permutation null."""
    from alignment.metrics import permutation_null

    out = {}
    for name in ("cka", "unbiased_cka", "mutual_knn"):
        kw = {"k": min(k, len(X) - 1)} if name == "mutual_knn" else {}
        r = permutation_null(name, X, Y, n_perm=n_perm, seed=seed, **kw)
        out[name] = {key: r[key] for key in ("score", "null_mean", "null_std", "z")}
    return out


def verdict(unpaired: dict, paired: dict | None = None) -> tuple[str, str]:
    """("feasible" | "infeasible", the reason in one sentence) from the signals."""
    st, mg = unpaired["stability"], unpaired["surrogate_margin"]
    reasons = []
    if not st >= STABLE:
        reasons.append(f"bootstrap restarts disagree (stability {st:.2f} < {STABLE})")
    if not mg >= MARGIN:
        reasons.append(f"the matcher scores no better on these clouds than on a spectrum-only surrogate "
                       f"(margin {mg:+.3f} < {MARGIN})")
    if paired is not None:
        c = paired["unbiased_cka"]["score"]
        if not c >= CKA_OK:
            reasons.append(f"unbiased CKA on the pairs is {c:.2f} < {CKA_OK} (pair-free fails below ~0.5 in "
                           "Schnaus et al. 2026)")
    if reasons:
        return "infeasible", "; ".join(reasons)
    why = f"bootstrap restarts agree (stability {st:.2f}) and the matcher beats a spectrum-only surrogate by {mg:+.3f}"
    if paired is not None:
        why += f"; unbiased CKA {paired['unbiased_cka']['score']:.2f}"
    return "feasible", why


def diagnose(X, Y, pairs=None, restarts: int = 3, n_perm: int = 20, seed: int = 0, matcher=None) -> dict:
    """Signals and verdict for clouds X (N1, D1), Y (N2, D2); ``pairs`` = (Xp, Yp) paired rows if known;
    ``matcher``: the matcher whose answers are judged (a registry name, default "auto"; see
    :func:`matcher_signals`)."""
    un = unpaired_signals(X, Y, restarts=restarts, seed=seed, matcher=matcher)
    pa = paired_signals(*pairs, n_perm=n_perm, seed=seed) if pairs is not None else None
    v, why = verdict(un, pa)
    return {"unpaired": un, "paired": pa, "verdict": v, "reason": why,
            "n_x": int(len(X)), "n_y": int(len(Y)), "d_x": int(X.shape[1]), "d_y": int(Y.shape[1])}


__all__ = ["STABLE", "MARGIN", "CKA_OK", "check_clouds", "diagnose", "matched_cosine", "paired_signals", "unpaired_signals",
           "verdict", "spectrum_overlap", "distance_agreement", "knn_graph_agreement", "matcher_signals"]
