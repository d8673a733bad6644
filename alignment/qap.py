"""Class-level matching as a quadratic assignment problem (as in the Blind Match benchmark).

With C classes seen by two encoders, compute each side's C x C similarity matrix between class centroids
(A from images, B from texts) and find the permutation that makes them agree:

    perm = argmax_p  sum_{i,j} A[i, j] * B[p(i), p(j)]        (= argmin ||A - P B P^T||_F)

``perm[i]`` is the class of B matched to class i of A. Exact brute force is feasible up to 10 classes
(10! = 3.6M permutations, enumerated in vectorised prefix blocks); above, scipy's FAQ with restarts.

Example
-------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> A = rng.standard_normal((6, 6)); A = A + A.T
>>> p = rng.permutation(6)
>>> B = np.empty_like(A); B[np.ix_(p, p)] = A        # B[p[i], p[j]] = A[i, j]
>>> bool((match_classes(A, B, method="brute") == p).all())
True
"""
from __future__ import annotations

import numpy as np

from alignment._checks import as_matrix
from alignment.errors import AlignmentError

BRUTE_MAX = 10  # 10! = 3,628,800 permutations: a few seconds vectorised; 11! would be 40M
AUTO_BRUTE_MAX = 9  # "auto" uses brute force up to here (9! = 362,880: well under a second)


def qap_objective(A, B, perm) -> float:
    """sum_{i,j} A[i, j] * B[perm[i], perm[j]]."""
    perm = np.asarray(perm)
    return float((np.asarray(A) * np.asarray(B)[np.ix_(perm, perm)]).sum())


def _check(A_sim, B_sim):
    A = as_matrix(A_sim, "A_sim", allow_constant=True).astype(np.float64)
    B = as_matrix(B_sim, "B_sim", allow_constant=True).astype(np.float64)
    if A.shape[0] != A.shape[1] or B.shape[0] != B.shape[1]:
        raise AlignmentError(f"similarity matrices must be square (C, C), got {A.shape} and {B.shape}")
    if A.shape != B.shape:
        raise AlignmentError(f"A_sim is {A.shape[0]}x{A.shape[0]} but B_sim is {B.shape[0]}x{B.shape[0]}; "
                             "class-level matching needs the same classes on both sides")
    return A, B


def brute_force_qap(A_sim, B_sim, maximize: bool = True, block: int = 200_000):
    """Exact QAP by enumerating all C! permutations (C <= 10).

    Permutations are grown position by position; each prefix carries its partial objective, so a new
    position m adds A[m, m] B[j, j] + sum_{i<m} (A[i, m] B[p_i, j] + A[m, i] B[j, p_i]). Once the number
    of prefixes would pass ``block``, the remaining levels are expanded block by block (bounded memory).

    Returns
    -------
    perm : (C,) int64 ; value : float, the objective at perm
    """
    A, B = _check(A_sim, B_sim)
    n = A.shape[0]
    if n > BRUTE_MAX:
        raise AlignmentError(f"brute force is for <= {BRUTE_MAX} classes ({BRUTE_MAX}! permutations), got {n}; "
                             "use method='faq'")
    sign = 1.0 if maximize else -1.0

    def extend(perms, score, m):
        """All one-position extensions of the prefixes (P, m) with their scores."""
        P = perms.shape[0]
        used = np.zeros((P, n), bool)
        if m:
            used[np.arange(P)[:, None], perms] = True
        free = np.nonzero(~used)[1].reshape(P, n - m)  # row-major: each prefix's unused classes in order
        j = free.reshape(-1)
        prev = np.repeat(perms, n - m, axis=0)  # (P * (n - m), m)
        gain = A[m, m] * B[j, j]
        if m:
            gain = gain + (B[prev, j[:, None]] * A[:m, m]).sum(1) + (B[j[:, None], prev] * A[m, :m]).sum(1)
        return np.concatenate([prev, j[:, None]], 1).astype(np.int16), np.repeat(score, n - m) + gain

    def best_of(perms, score, m):
        """Depth-first over blocks from level m to the end; returns the best complete (perm, score)."""
        while m < n and perms.shape[0] * (n - m) <= block:
            perms, score = extend(perms, score, m)
            m += 1
        if m == n:
            i = int(np.argmax(sign * score))
            return perms[i], score[i]
        step = max(1, block // (n - m))
        best = (None, -np.inf)
        for s in range(0, perms.shape[0], step):
            p, v = best_of(*extend(perms[s:s + step], score[s:s + step], m), m + 1)
            if sign * v > best[1]:
                best = (p, sign * v)
        return best[0], sign * best[1]

    perm, value = best_of(np.zeros((1, 0), np.int16), np.zeros(1), 0)
    return np.asarray(perm, np.int64), float(value)


def faq_qap(A_sim, B_sim, maximize: bool = True, restarts: int = 20, seed: int = 0, maxiter: int = 100):
    """scipy's Fast Approximate QAP (Vogelstein et al. 2015) from the barycentre and ``restarts - 1``
    random doubly-stochastic starts, each polished by scipy's 2-opt local search; the best objective wins.

    Returns
    -------
    perm : (C,) int64 ; value : float
    """
    from scipy.optimize import quadratic_assignment

    A, B = _check(A_sim, B_sim)
    rng = np.random.default_rng(seed)
    best = None
    for r in range(max(1, restarts)):
        opts = {"maximize": maximize, "maxiter": maxiter, "tol": 1e-4, "rng": rng,
                "P0": "barycenter" if r == 0 else "randomized"}
        res = quadratic_assignment(A, B, method="faq", options=opts)
        guess = np.column_stack([np.arange(len(A)), res.col_ind])
        res = quadratic_assignment(A, B, method="2opt", options={"maximize": maximize, "rng": rng,
                                                                  "partial_guess": guess})
        v = qap_objective(A, B, res.col_ind)
        if best is None or (v > best[1] if maximize else v < best[1]):
            best = (np.asarray(res.col_ind, np.int64), v)
    return best


def match_classes(A_sim, B_sim, method: str = "auto", restarts: int = 20, seed: int = 0,
                  maximize: bool = True) -> np.ndarray:
    """Match C classes of two encoders from their (C, C) centroid-similarity matrices.

    Parameters
    ----------
    A_sim, B_sim : (C, C) similarity matrices (e.g. :func:`centroid_similarity` of each side)
    method : "brute" (exact, C <= 10), "faq" (scipy, ``restarts`` starts) or "auto" (brute up to 9 classes)
    maximize : True for similarities, False for distances

    Returns
    -------
    perm : (C,) int64, ``perm[i]`` = class of B matched to class i of A
    """
    A, B = _check(A_sim, B_sim)
    n = A.shape[0]
    if n == 1:
        return np.zeros(1, np.int64)
    if method == "auto":
        method = "brute" if n <= AUTO_BRUTE_MAX else "faq"
    if method == "brute":
        return brute_force_qap(A, B, maximize=maximize)[0]
    if method == "faq":
        return faq_qap(A, B, maximize=maximize, restarts=restarts, seed=seed)[0]
    raise AlignmentError(f"unknown QAP method {method!r}; use 'auto', 'brute' or 'faq'")


def centroid_similarity(X, labels, classes=None):
    """Cosine similarity between the class centroids of L2-normalised rows.

    Parameters
    ----------
    X : (N, D) ; labels : (N,) class of each row ; classes : order of the classes (default: sorted unique)

    Returns
    -------
    S : (C, C) ; classes : list of the C classes in the order of S
    """
    X = as_matrix(X, "X", allow_constant=True).astype(np.float64)
    labels = np.asarray(labels)
    if len(labels) != len(X):
        raise AlignmentError(f"labels has {len(labels)} entries for {len(X)} rows")
    classes = list(np.unique(labels)) if classes is None else list(classes)
    Xn = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    cents = []
    for c in classes:
        rows = Xn[labels == c]
        if len(rows) == 0:
            raise AlignmentError(f"class {c!r} has no rows")
        cents.append(rows.mean(0))
    C = np.stack(cents)
    C /= np.maximum(np.linalg.norm(C, axis=1, keepdims=True), 1e-12)
    return C @ C.T, classes
