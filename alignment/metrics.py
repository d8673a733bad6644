"""Representation-alignment metrics between paired rows, as defined in the Platonic Representation
Hypothesis code (Huh et al., 2024, ``platonic-rep/metrics.py``), plus a permutation null and retrieval recall.

Every metric takes X (N, D1) and Y (N, D2) whose row i describes the same item, and by default first
L2-normalises the rows (as PRH's ``compute_score`` does); ``clamp=0.95`` additionally clips each feature
to the mean per-row 0.95-quantile of |x| first (PRH's ``remove_outliers``).

| name | definition |
| --- | --- |
| ``mutual_knn`` | mean over rows of |kNN_X(i) & kNN_Y(i)| / k, neighbours by inner product, self excluded |
| ``cka`` | HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)), biased HSIC = tr(K H L H), linear kernels K = X X^T |
| ``unbiased_cka`` | the same with the unbiased HSIC of Song et al. (2012), eq. 5 |
| ``cknna`` | CKA restricted to mutual k-NN pairs: unbiased HSIC of (M o K, M o L), M = kNN_K & kNN_L |
| ``svcca`` | mean canonical correlation of the top-``cca_dim`` singular directions of the standardised features |

Departures, all deliberate: no ``+1e-6`` in the CKA denominators (it biases small inputs away from the
exact value, e.g. CKA(X, X) < 1); SVCCA's canonical correlations are computed exactly as the singular values
of U_X^T U_Y (both orthonormal) rather than with sklearn's iterative CCA; linear CKA is computed in feature
space (||X_c^T Y_c||_F^2 and the unbiased analogue), which equals the kernel formula without N x N matrices.

Example
-------
>>> import numpy as np
>>> X = np.random.default_rng(0).standard_normal((50, 8))
>>> round(score("cka", X, X), 6), score("mutual_knn", X, X, k=5)
(1.0, 1.0)
"""
from __future__ import annotations

import numpy as np

from alignment._checks import as_matrix, check_pair
from alignment.errors import AlignmentError


# ----------------------------------------------------------------------------------------------- preprocessing
def clamp_outliers(X, q: float = 0.95) -> np.ndarray:
    """Clip features to +-t, t = mean over rows of the per-row q-quantile of |x| (PRH ``remove_outliers``)."""
    if q is None or q >= 1:
        return X
    t = float(np.quantile(np.abs(X), q, axis=1).mean())
    return np.clip(X, -t, t)


def l2_normalize(X) -> np.ndarray:
    """Rows scaled to unit length.

    Parameters
    ----------
    X : (N, D)

    Returns
    -------
    np.ndarray, shape (N, D)
    """
    n = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.maximum(n, 1e-12)


def _prepare(X, Y, normalize=True, clamp=None, min_rows=2, what=""):
    X, Y = check_pair(X, Y, dtype=np.float64)
    if X.shape[0] < min_rows:
        raise AlignmentError(f"{what or 'this metric'} needs at least {min_rows} rows, got {X.shape[0]}")
    if clamp is not None:
        X, Y = clamp_outliers(X, clamp), clamp_outliers(Y, clamp)
    if normalize:
        X, Y = l2_normalize(X), l2_normalize(Y)
    return X, Y


# ----------------------------------------------------------------------------------------------- neighbours
def knn_indices(X, k: int, chunk: int = 2048) -> np.ndarray:
    """Each row's k nearest rows by inner product, self excluded.

    Parameters
    ----------
    X : (N, D)
    k : neighbours per row (k < N)
    chunk : rows per block (memory O(chunk x N))

    Returns
    -------
    np.ndarray, shape (N, k), int: the neighbours' row indices
    """
    n = X.shape[0]
    if k >= n:
        raise AlignmentError(f"k={k} neighbours need at least {k + 1} rows (self is excluded), got {n}")
    out = np.empty((n, k), np.int64)
    for s in range(0, n, chunk):
        S = X[s:s + chunk] @ X.T  # (c, N)
        S[np.arange(S.shape[0]), np.arange(s, s + S.shape[0])] = -np.inf
        j = np.argpartition(-S, k - 1, axis=1)[:, :k]
        out[s:s + len(S)] = np.take_along_axis(j, np.argsort(-np.take_along_axis(S, j, 1), 1, kind="stable"), 1)
    return out


def _overlap(a, b) -> np.ndarray:
    """Per row, the number of shared entries of two (N, k) index arrays (entries unique per row)."""
    return (a[:, :, None] == b[:, None, :]).any(2).sum(1)


def mutual_knn(X, Y, k: int = 10, normalize: bool = True, clamp: float | None = None) -> float:
    """Mutual k-NN alignment: mean_i |N_k^X(i) & N_k^Y(i)| / k (inner product, self excluded).

    X : (N, D1), Y : (N, D2) paired rows; N > k. Returns a value in [0, 1]; chance is about k / (N - 1).
    """
    X, Y = _prepare(X, Y, normalize, clamp, min_rows=k + 1,
                    what=f"mutual_knn with k={k} (neighbours exclude the row itself)")
    return float(_overlap(knn_indices(X, k), knn_indices(Y, k)).mean() / k)


# ----------------------------------------------------------------------------------------------- kernels
def hsic_biased(K, L) -> float:
    """tr(K H L H) with H = I - 11^T / n (Gretton et al. 2005; PRH's ``hsic_biased``)."""
    K, L = np.asarray(K, np.float64), np.asarray(L, np.float64)
    Kc = K - K.mean(0, keepdims=True) - K.mean(1, keepdims=True) + K.mean()
    return float((Kc * L.T).sum())


def hsic_unbiased(K, L) -> float:
    """Unbiased HSIC (Song et al. 2012, eq. 5; PRH's ``hsic_unbiased``) of two (n, n) kernels, n >= 4.

    [tr(K~ L~) + 1^T K~ 1 1^T L~ 1 / ((n-1)(n-2)) - 2 1^T K~ L~ 1 / (n-2)] / (n (n-3)), K~ = K with zero
    diagonal. Works for scipy.sparse inputs too (used by CKNNA)."""
    import scipy.sparse as sp

    n = K.shape[0]
    if n < 4:
        raise AlignmentError(f"unbiased HSIC needs at least 4 rows, got {n}")
    if sp.issparse(K) or sp.issparse(L):
        K, L = sp.csr_matrix(K, dtype=np.float64), sp.csr_matrix(L, dtype=np.float64)
        K = K - sp.diags(K.diagonal())
        L = L - sp.diags(L.diagonal())
        tr = float(K.multiply(L.T).sum())
        sk, sl = float(K.sum()), float(L.sum())
        kl = float(np.asarray(K.sum(0)).ravel() @ np.asarray(L.sum(1)).ravel())
    else:
        K, L = np.array(K, np.float64), np.array(L, np.float64)
        np.fill_diagonal(K, 0)
        np.fill_diagonal(L, 0)
        tr = float((K * L.T).sum())
        sk, sl = K.sum(), L.sum()
        kl = float(K.sum(0) @ L.sum(1))
    return (tr + sk * sl / ((n - 1) * (n - 2)) - 2 * kl / (n - 2)) / (n * (n - 3))


def _linear_hsic(X, Y, unbiased: bool) -> float:
    """HSIC of the linear kernels X X^T and Y Y^T without forming them (O(N D1 D2))."""
    n = X.shape[0]
    if not unbiased:
        Xc, Yc = X - X.mean(0), Y - Y.mean(0)
        return float(np.linalg.norm(Xc.T @ Yc) ** 2)  # tr(K H L H) = ||X_c^T Y_c||_F^2
    if n < 4:
        raise AlignmentError(f"unbiased CKA needs at least 4 rows, got {n}")
    kx, ly = (X * X).sum(1), (Y * Y).sum(1)  # kernel diagonals
    tr = float(np.linalg.norm(X.T @ Y) ** 2 - kx @ ly)  # tr(K~ L~)
    k1 = X @ X.sum(0) - kx  # K~ 1
    l1 = Y @ Y.sum(0) - ly  # L~ 1
    sk, sl = float(k1.sum()), float(l1.sum())
    return (tr + sk * sl / ((n - 1) * (n - 2)) - 2 * float(k1 @ l1) / (n - 2)) / (n * (n - 3))


def cka(X, Y, unbiased: bool = False, kernel: str = "linear", rbf_sigma: float = 1.0, normalize: bool = True,
        clamp: float | None = None) -> float:
    """Centered kernel alignment HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)).

    Invariant to rotations and isotropic scaling of either side.

    Parameters
    ----------
    X : (N, D1), Y : (N, D2) paired rows (row i of each describes the same item)
    unbiased : the unbiased HSIC estimator (Song et al. 2012) instead of tr(K H L H)
    kernel : "linear" (inner product, computed in feature space) or "rbf" (exp(-||a - b||^2 / (2 sigma^2)), N x N)
    rbf_sigma : the RBF kernel's width
    normalize : L2-normalise the rows first (as PRH does)
    clamp : clip outlying features first (``clamp_outliers``), e.g. 0.95

    Returns
    -------
    float in [0, 1] (the unbiased estimate may dip below 0); 1 for X == Y
    """
    X, Y = _prepare(X, Y, normalize, clamp, min_rows=4 if unbiased else 2,
                    what="unbiased CKA" if unbiased else "CKA")
    if kernel == "linear":
        kl, kk, ll = _linear_hsic(X, Y, unbiased), _linear_hsic(X, X, unbiased), _linear_hsic(Y, Y, unbiased)
    elif kernel == "rbf":
        def gram(Z):
            sq = (Z * Z).sum(1)
            return np.exp(-np.maximum(sq[:, None] + sq[None, :] - 2 * Z @ Z.T, 0) / (2 * rbf_sigma ** 2))

        K, L = gram(X), gram(Y)
        h = hsic_unbiased if unbiased else hsic_biased
        kl, kk, ll = h(K, L), h(K, K), h(L, L)
    else:
        raise AlignmentError(f"kernel must be 'linear' or 'rbf', not {kernel!r}")
    denom = np.sqrt(max(kk, 0.0) * max(ll, 0.0))
    if denom == 0:
        raise AlignmentError("CKA is undefined: one side has zero variance after normalisation "
                             "(all rows point the same way)")
    return float(kl / denom)


def unbiased_cka(X, Y, **kw) -> float:
    """CKA with the unbiased HSIC estimator (PRH ``unbiased_cka``).

    Parameters
    ----------
    X : (N, D1), Y : (N, D2) paired rows, N >= 4
    **kw : as for :func:`cka`

    Returns
    -------
    float
    """
    return cka(X, Y, unbiased=True, **kw)


def cknna(X, Y, k: int = 10, normalize: bool = True, clamp: float | None = None) -> float:
    """Centered kernel nearest-neighbour alignment (PRH ``cknna``, unbiased variant).

    sim(K, L) = HSIC_u(M o K, M o L) with M the intersection of the two top-k neighbour masks (self
    excluded); CKNNA = sim(K, L) / sqrt(sim(K, K) sim(L, L)).

    Parameters
    ----------
    X : (N, D1), Y : (N, D2) paired rows, N > k
    k : neighbours per row, k >= 2
    normalize, clamp : as for :func:`cka`

    Returns
    -------
    float
    """
    import scipy.sparse as sp

    if k < 2:
        raise AlignmentError("CKNNA needs k >= 2")
    X, Y = _prepare(X, Y, normalize, clamp, min_rows=max(k + 1, 4), what=f"cknna with k={k}")
    n = X.shape[0]
    nx, ny = knn_indices(X, k), knn_indices(Y, k)
    rows = np.repeat(np.arange(n), k)

    def masked(Z, idx, keep):
        """Sparse M o (Z Z^T) over the neighbour entries ``idx`` (N, k) kept by ``keep`` (N, k)."""
        r, c = rows[keep.ravel()], idx.ravel()[keep.ravel()]
        vals = (Z[r] * Z[c]).sum(1)
        return sp.csr_matrix((vals, (r, c)), shape=(n, n))

    # mask_X & mask_Y: entries of X's neighbour list that are also in Y's
    both = (nx[:, :, None] == ny[:, None, :]).any(2)  # (N, k) over nx
    all_x = np.ones_like(both)
    kl = hsic_unbiased(masked(X, nx, both), masked(Y, nx, both))
    kk = hsic_unbiased(masked(X, nx, all_x), masked(X, nx, all_x))
    ll = hsic_unbiased(masked(Y, ny, all_x), masked(Y, ny, all_x))
    denom = np.sqrt(max(kk, 0.0) * max(ll, 0.0))
    if denom == 0:
        raise AlignmentError("CKNNA is undefined here: the neighbour kernels have zero HSIC")
    return float(kl / denom)


def svcca(X, Y, cca_dim: int = 10, normalize: bool = True, clamp: float | None = None) -> float:
    """SVCCA (Raghu et al. 2017; PRH ``svcca``): standardise each feature, keep the top ``cca_dim`` left
    singular vectors of each side, return the mean canonical correlation between them (exact: the singular
    values of U_X^T U_Y).

    Parameters
    ----------
    X : (N, D1), Y : (N, D2) paired rows, N > cca_dim and D1, D2 >= cca_dim
    cca_dim : directions kept per side
    normalize, clamp : as for :func:`cka`

    Returns
    -------
    float in [0, 1]
    """
    X, Y = _prepare(X, Y, normalize, clamp, min_rows=cca_dim + 1, what=f"svcca with cca_dim={cca_dim}")
    if min(X.shape[1], Y.shape[1]) < cca_dim:
        raise AlignmentError(f"svcca with cca_dim={cca_dim} needs at least {cca_dim} features per side, got "
                             f"{X.shape[1]} and {Y.shape[1]}")

    def top_u(Z):
        Z = Z - Z.mean(0)
        Z = Z / (Z.std(0) + 1e-8)
        U, s, _ = np.linalg.svd(Z, full_matrices=False)
        if (s[:cca_dim] <= s[0] * 1e-10).any():
            raise AlignmentError(f"svcca: the features span fewer than cca_dim={cca_dim} directions")
        return U[:, :cca_dim]

    rho = np.linalg.svd(top_u(X).T @ top_u(Y), compute_uv=False)
    return float(np.clip(rho, 0, 1).mean())


METRICS = {
    "mutual_knn": mutual_knn,
    "cka": cka,
    "unbiased_cka": unbiased_cka,
    "cknna": cknna,
    "svcca": svcca,
}


def score(name: str, X, Y, **kw) -> float:
    """Alignment of paired rows by metric name.

    Parameters
    ----------
    name : a key of ``METRICS``: "mutual_knn", "cka", "unbiased_cka", "cknna", "svcca"
    X : (N, D1), Y : (N, D2) paired rows
    **kw : the metric's options (``k``, ``normalize``, ``clamp`` ...)

    Returns
    -------
    float

    Raises
    ------
    AlignmentError : an unknown name (the message lists the known ones)
    """
    if name not in METRICS:
        raise AlignmentError(f"unknown metric {name!r}; choose from {', '.join(METRICS)}")
    return METRICS[name](X, Y, **kw)


def permutation_null(name: str, X, Y, n_perm: int = 20, seed: int = 0, **kw) -> dict:
    """The score against chance: the same metric with Y's rows shuffled (pairing destroyed) ``n_perm`` times.

    Returns
    -------
    dict(score, null_mean, null_std, z, p, n_perm): z = (score - null_mean) / null_std; p is the
    (add-one) fraction of shuffles scoring at least as high.
    """
    if n_perm < 2:
        raise AlignmentError(f"n_perm must be >= 2 to estimate a spread, got {n_perm}")
    X, Y = check_pair(X, Y)
    s = score(name, X, Y, **kw)
    rng = np.random.default_rng(seed)
    null = np.array([score(name, X, Y[rng.permutation(len(Y))], **kw) for _ in range(n_perm)])
    sd = float(null.std(ddof=1))
    z = (s - null.mean()) / sd if sd > 0 else (float("inf") if s > null.mean() else 0.0)
    return {"metric": name, "score": float(s), "null_mean": float(null.mean()), "null_std": sd, "z": float(z),
            "p": float((1 + (null >= s).sum()) / (n_perm + 1)), "n_perm": int(n_perm)}


# ----------------------------------------------------------------------------------------------- matching
def foscttm(X, Y, metric: str = "euclidean", chunk: int = 2048) -> float:
    """Fraction Of Samples Closer Than the True Match (FOSCTTM; Liu et al. 2019, as the Rosetta paper,
    Schnaus et al. 2026, reports it): 0 is perfect, 0.5 is chance.

    For each row i of X, the fraction of the other rows j of Y that are closer to x_i than its partner
    y_i; ties count one half (mid-ranks, so neither the rows' order nor a shuffle of both sides moves the
    value); the same from Y's side; the mean of both.

    .. math:: \\frac{1}{2n(n-1)} \\sum_i \\big[\\#\\{j: d_{ij} < d_{ii}\\} + \\#\\{j: d_{ji} < d_{ii}\\}
              + \\tfrac12 (\\#\\{j \\ne i: d_{ij} = d_{ii}\\} + \\#\\{j \\ne i: d_{ji} = d_{ii}\\})\\big]

    Parameters
    ----------
    X : (N, D) rows already mapped into Y's space (e.g. ``rotation.transform(X)``)
    Y : (N, D) row i is the true partner of X's row i
    metric : "euclidean" or "cosine" (1 - cosine similarity)

    Returns
    -------
    float in [0, 1]

    Example
    -------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).standard_normal((100, 8))
    >>> foscttm(X, X), foscttm(X, X[::-1]) > 0.3
    (0.0, True)
    """
    X = as_matrix(X, "X", allow_constant=True).astype(np.float64)
    Y = as_matrix(Y, "Y", allow_constant=True).astype(np.float64)
    if X.shape != Y.shape:
        raise AlignmentError(f"FOSCTTM needs paired rows in one space: X is {X.shape}, Y is {Y.shape} (map X "
                             "into Y's space first, one row per partner)")
    n = len(X)
    if n < 2:
        raise AlignmentError(f"FOSCTTM needs at least 2 pairs, got {n}")
    if metric == "cosine":
        X, Y = l2_normalize(X), l2_normalize(Y)
    elif metric != "euclidean":
        raise AlignmentError(f"metric must be 'euclidean' or 'cosine', not {metric!r}")
    xn, yn = (X * X).sum(1), (Y * Y).sum(1)
    diag = ((X - Y) ** 2).sum(1)  # d_ii, computed directly (not from the expansion: exact ties stay ties)
    total = 0.0
    for a, an, b, bn in ((X, xn, Y, yn), (Y, yn, X, xn)):
        for s in range(0, n, chunk):
            D = an[s:s + chunk, None] + bn[None, :] - 2 * a[s:s + chunk] @ b.T  # (c, N)
            rows = np.arange(len(D))
            D[rows, s + rows] = diag[s:s + chunk]
            # relative tolerance: distances equal up to the expansion's rounding count as ties
            tol = 1e-9 * (an[s:s + chunk, None] + bn[None, :] + 1e-300)
            ref = diag[s:s + chunk, None]
            less = (D < ref - tol).sum(1)
            ties = (np.abs(D - ref) <= tol).sum(1) - 1  # the partner itself is not a tie
            total += float((less + 0.5 * ties).sum())
    return total / (2.0 * n * (n - 1))


# ----------------------------------------------------------------------------------------------- retrieval
def recall_at_k(query, keys, gt, ks=(1, 5, 10), chunk: int = 2048) -> dict:
    """Retrieval recall of keys for each query by cosine similarity.

    Parameters
    ----------
    query : (Nq, D), keys : (Nk, D) (same space, e.g. rotated image embeddings vs caption embeddings)
    gt : (Nq,) index of the correct key per query, or a list of Nq collections of correct key indices
        (a hit is any of them; e.g. several captions per image)
    ks : cut-offs

    Returns
    -------
    dict with "R@k" for each k, "median_rank" (1-based rank of the best correct key), "mean_rank",
    "chance@1" (mean number of correct keys / Nk), "n_queries", "n_keys"
    """
    Q = l2_normalize(as_matrix(query, "query", allow_constant=True).astype(np.float32))
    K = l2_normalize(as_matrix(keys, "keys", allow_constant=True).astype(np.float32))
    if Q.shape[1] != K.shape[1]:
        raise AlignmentError(f"query is {Q.shape[1]}-dimensional but keys are {K.shape[1]}-dimensional; map "
                             "the queries into the keys' space first")
    nq, nk = len(Q), len(K)
    items = gt.tolist() if isinstance(gt, np.ndarray) else list(gt)
    sets = [[int(g)] if np.isscalar(g) else [int(v) for v in g] for g in items]
    single = all(len(g) == 1 for g in sets)
    if len(sets) != nq:
        raise AlignmentError(f"gt has {len(sets)} entries for {nq} queries")
    for i, g in enumerate(sets):
        if not g:
            raise AlignmentError(f"query {i} has no correct key in gt")
        if min(g) < 0 or max(g) >= nk:
            raise AlignmentError(f"gt[{i}] = {g} is outside 0..{nk - 1}")
    ranks = np.empty(nq, np.int64)
    for s in range(0, nq, chunk):
        S = Q[s:s + chunk] @ K.T  # (c, Nk)
        if single:
            best = S[np.arange(len(S)), [g[0] for g in sets[s:s + chunk]]]
        else:
            best = np.array([S[r, sets[s + r]].max() for r in range(len(S))])
        ranks[s:s + len(S)] = (S > best[:, None]).sum(1) + 1
    out = {f"R@{k}": float((ranks <= k).mean()) for k in ks}
    out.update(median_rank=float(np.median(ranks)), mean_rank=float(ranks.mean()),
               **{"chance@1": float(np.mean([len(g) for g in sets]) / nk)}, n_queries=int(nq), n_keys=int(nk))
    return out
