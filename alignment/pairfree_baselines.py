"""Pair-free baselines behind :func:`alignment.pairfree.match`: coarse-to-fine Wasserstein-Procrustes ("wp")
and POT's entropic Gromov-Wasserstein ("gw"). Both return :class:`alignment.pairfree.MatchResult`."""
from __future__ import annotations

import time

import numpy as np

from alignment._checks import blas_threads
from alignment.errors import AlignmentError
from alignment.matching import MatchResult, prepare, rotation_from, weighted_procrustes
from alignment.neighbours import assign, mutual_and_coupling, mutual_neighbours, sqnorm
from alignment.procrustes import svd


# ----------------------------------------------------------------------------------------------- WP
def match_wp(X, Y, dim: int | None = 32, stages=(4, 8, 16, 32, 64), starts: int = 40, keep: int = 4,
             expand: int = 8, iters: int = 10, search_n: int = 500, refine_n: int = 3000, rows_l2: bool = True,
             dense_max: int = 25_000_000, seed: int = 0, progress: bool = False, **meta) -> MatchResult:
    """Coarse-to-fine Wasserstein-Procrustes: for clouds that are only loosely isomorphic (real encoders).

    Alternates an exact one-to-one assignment (``linear_sum_assignment``, i.e. optimal transport between
    uniform point sets) with Procrustes, objective min_{R, P} sum_i ||a_i R - b_P(i)||^2, as in Grave et al.
    (2019). The rotation space is searched coarse to fine over the leading principal axes: ``starts`` random
    rotations of the top ``stages[0]`` axes; the ``keep`` lowest-cost solutions are extended by ``expand``
    random rotations of the axes added at the next stage, and so on up to ``dim``. Search on a random
    subsample of ``search_n`` rows per side, then refine on ``refine_n`` and assign all rows.

    Parameters
    ----------
    X : (N1, D1), Y : (N2, D2)
    dim : shared dimension (default 32; None = min(D1, D2, N - 1))
    rows_l2 : centre then L2-normalise rows before PCA (cosine geometry)

    Returns
    -------
    MatchResult; ``info["ot_cost"]`` is the final mean squared distance of the assignment (lower is better)
    """
    from scipy.optimize import linear_sum_assignment

    t0 = time.perf_counter()
    if dim is not None and np.ndim(X) == 2 and np.ndim(Y) == 2:
        dim = min(dim, np.shape(X)[1], np.shape(Y)[1])  # the default 32 on smaller embeddings
    prep = prepare(X, Y, dim, True, rows_l2)
    A, B = prep.A, prep.B
    (n1, d), n2 = A.shape, B.shape[0]
    rng = np.random.default_rng(seed)
    xs = rng.permutation(n1)[:search_n]
    ys = rng.permutation(n2)[:search_n]
    steps = [k for k in stages if k < d] + [d]

    def wp(R, As, Bs, k, n_it):
        """Alternate assignment and Procrustes in the top k axes; returns (R, mean cost, cols)."""
        Ak, Bk = As[:, :k], Bs[:, :k]
        for it in range(n_it + 1):
            C = sqnorm(Ak @ R)[:, None] + sqnorm(Bk)[None, :] - 2.0 * ((Ak @ R) @ Bk.T)
            r, c = linear_sum_assignment(C)
            if it == n_it:
                return R, float(C[r, c].mean()), (r, c)
            R = weighted_procrustes(Ak[r], Bk[c])

    hist = []
    with blas_threads(1):
        As, Bs = A[xs], B[ys]
        cands = [_haar(steps[0], rng) for _ in range(starts)]
        it = steps
        if progress:
            from tqdm.auto import tqdm

            it = tqdm(steps, desc="wasserstein-procrustes", leave=False)
        for si, k in enumerate(it):
            out = sorted((wp(R0, As, Bs, k, iters)[:2] for R0 in cands), key=lambda t: t[1])
            hist.append((k, round(out[0][1], 5)))
            if si + 1 < len(steps):
                k2 = steps[si + 1]
                cands = []
                for R, _ in out[:keep]:
                    for _ in range(expand):
                        E = np.eye(k2, dtype=np.float32)
                        E[:k, :k] = R
                        M = np.eye(k2, dtype=np.float32)
                        M[k:, k:] = _haar(k2 - k, rng)
                        cands.append(E @ M)
        R = out[0][0]
        if min(n1, n2) > len(xs) or min(n1, n2) > len(ys):  # refine on more rows
            xr, yr = rng.permutation(n1)[:refine_n], rng.permutation(n2)[:refine_n]
            R, _, _ = wp(R, A[xr], B[yr], d, 5)
    perm, dist, cand = assign(A @ R, B, dense_max, 4, 32, progress)
    ok = perm >= 0
    mutual_rate, coupling = mutual_and_coupling(cand, n1, n2)
    info = {"method": "wp", "n1": n1, "n2": n2, "dim": d, "stages": hist, "ot_cost": float(dist[ok].mean()),
            "mutual_rate": float(mutual_rate), "matched": int(ok.sum()), "search_n": int(len(xs)),
            "seconds": round(time.perf_counter() - t0, 3)}
    rot = rotation_from(prep, R, "pairfree-wp", 1.0, {**meta, "fit": {"pairfree": info}})
    return MatchResult(rot, perm, coupling, float(mutual_rate), info)


def _haar(k, rng):
    Qm, Rm = np.linalg.qr(rng.standard_normal((k, k)))
    return (Qm * np.sign(np.diag(Rm))).astype(np.float32)


# ----------------------------------------------------------------------------------------------- GW baseline
def match_gw(X, Y, dim: int | None = None, epsilon: float = 5e-3, max_iter: int = 1000, normalize: bool = True,
             max_n: int = 10_000, seed: int = 0, progress: bool = False, **meta) -> MatchResult:
    """Reference baseline: POT's entropic Gromov-Wasserstein between the two clouds' distance matrices.

    min_T sum_{ijkl} (C1_ik - C2_jl)^2 T_ij T_kl - epsilon H(T), T 1 = p, T^T 1 = q (uniform), with C the
    squared Euclidean distances divided by their mean. The rotation is then the Procrustes fit weighted by
    T: R = polar(A^T T B). The hard correspondence is linear_sum_assignment on -T.

    Parameters
    ----------
    X : (N1, D1), Y : (N2, D2) ; dim : shared dimension as in :func:`match_pairfree`
    epsilon : entropic regularisation (relative to the normalised costs)
    max_n : refuse larger inputs (two dense N x N float64 matrices plus the plan)

    Returns
    -------
    MatchResult with a dense (N1, N2) coupling.
    """
    import ot  # POT: only the baseline needs it

    t0 = time.perf_counter()
    prep = prepare(X, Y, dim, normalize)
    A, B = prep.A.astype(np.float64), prep.B.astype(np.float64)
    n1, n2 = len(A), len(B)
    if max(n1, n2) > max_n:
        raise AlignmentError(f"Gromov-Wasserstein needs dense {n1}x{n1} and {n2}x{n2} matrices; refusing "
                             f"N > max_n={max_n} (use method='ours')")
    C1 = np.maximum(sqnorm(A)[:, None] + sqnorm(A)[None, :] - 2 * A @ A.T, 0)
    C2 = np.maximum(sqnorm(B)[:, None] + sqnorm(B)[None, :] - 2 * B @ B.T, 0)
    C1 /= C1.mean()
    C2 /= C2.mean()
    p, q = np.full(n1, 1.0 / n1), np.full(n2, 1.0 / n2)
    import warnings

    with warnings.catch_warnings(record=True) as caught:  # inner Sinkhorn non-convergence: counted, not shown
        warnings.simplefilter("always")
        T = ot.gromov.entropic_gromov_wasserstein(C1, C2, p, q, loss_fun="square_loss", epsilon=epsilon,
                                                  max_iter=max_iter, verbose=False)
    del C1, C2
    from scipy.optimize import linear_sum_assignment

    r, c = linear_sum_assignment(-T)
    perm = np.full(n1, -1, np.int64)
    perm[r] = c
    R = _procrustes_from_plan(A, B, T)
    _, _, _, frac = mutual_neighbours(B.astype(np.float32), (A @ R).astype(np.float32)) if n1 * n2 <= 25e6 else (0, 0, 0, np.nan)
    info = {"method": "gw", "n1": n1, "n2": n2, "dim": A.shape[1], "epsilon": epsilon,
            "mutual_rate": float(frac), "seconds": round(time.perf_counter() - t0, 3),
            "solver_warnings": len(caught)}
    rot = rotation_from(prep, R.astype(np.float32), "pairfree-gw", 1.0, {**meta, "fit": {"pairfree": info}})
    return MatchResult(rot, perm, T, float(frac), info)


def _procrustes_from_plan(A, B, T):
    M = A.T @ (T @ B)  # (d, d) cross-covariance under the coupling
    U, _, Vt = svd(M)
    return U @ Vt
