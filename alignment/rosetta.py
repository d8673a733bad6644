"""The Rosetta recipe: pair-free alignment of two real encoders from cluster-level QAP starts, block
assignment and batch refinement.

Written from the description of "Shared Geometry as a Rosetta Stone" (Schnaus et al. 2026; its code is
dominik-schnaus/unpaired-rosetta), not from its code:

1. **Preprocessing.** Each side is centred by its own mean and its rows are L2-normalised (cosine geometry),
   then expressed in its own principal axes (d = min(D1, D2)); a rotation between the two bases is a
   semi-orthogonal map between the raw spaces, so D1 != D2 works.
2. **Starts.** ``restarts`` times: k-means with ``clusters`` centres on each side (on at most ``sample`` random
   rows a side); the two sets of centres matched by the permutation that maximises their linear CKA, a small
   QAP on the centred Gram matrices (:func:`alignment.qap.match_classes`, scipy's FAQ); the matched centres'
   cross-covariance C_x^T diag(w) C_y[perm] (w: the geometric mean of the two clusters' sizes), normalised.
   The restarts' cross-covariances are averaged, and their polar factor is the start: a wrong QAP answer
   adds an inconsistent term that averages out, right ones agree.
3. **Read-out.** Both sides shuffled and cut into blocks of at most ``batch`` rows; Hungarian assignment
   (``scipy.optimize.linear_sum_assignment``) between paired blocks under the start; Procrustes on all pairs.
4. **Refinement.** ``rounds`` times: a random batch of at most ``batch`` rows a side, Hungarian under the
   current map, Procrustes on the pairs. When a batch is the whole cloud the rounds are deterministic and stop
   once the assignment repeats. Known pairs (``seeds``) enter every Procrustes fit with total weight equal to
   the batch's pairs (each k / p for k pairs and p seeds).
5. The answer's correspondence: one-to-one assignment of all rows (:func:`alignment.neighbours._assign`).

Its ``score`` is :func:`assignment_score`, the label-free criterion ``match(method="auto")`` chooses by.

Example (the refinement alone, from a rough start)
-------
>>> import numpy as np
>>> rng = np.random.default_rng(2)
>>> A = (rng.standard_normal((800, 16)) * np.linspace(2, 0.5, 16)).astype(np.float32)
>>> Q = np.linalg.qr(rng.standard_normal((16, 16)))[0].astype(np.float32)
>>> R, _ = refine(A, (A @ Q)[rng.permutation(800)], polar(Q + 0.15 * rng.standard_normal((16, 16))))
>>> bool(np.abs(R - Q).max() < 1e-5)
True
"""
from __future__ import annotations

import time

import numpy as np

from alignment._checks import blas_threads
from alignment.errors import AlignmentError
from alignment.matching import MatchResult, check_seeds, prepare, rotation_from
from alignment.procrustes import svd


def polar(M) -> np.ndarray:
    """The orthogonal polar factor U V^T of M (d, d) = U S V^T: the Procrustes rotation of a cross-covariance."""
    U, _, Vt = svd(np.asarray(M, np.float64))
    return (U @ Vt).astype(np.float32)


def kmeans(Z, k: int, seed: int = 0, iters: int = 25, backend: str = "numpy"):
    """k-means of the rows of Z (n, m). ``backend="numpy"``: Lloyd's from a k-means++ start
    (:func:`alignment.csls._kmeans`); ``"faiss"``: ``faiss.Kmeans`` (random start, best of 3). The default is
    numpy: faiss's random start split one of five well separated blobs and merged two others where k-means++
    separated them (tests/test_alignment_real.py), and at the starts' size (30 centres, <= 10,000 rows) both take
    well under a second. Returns (labels (n,) int64, centres (k, m) float32)."""
    # numpy by default, measured side by side (eval/library_bench.py, 10,000 x 384, 30 blobs, 2 busy cores):
    # 0.58 s, inertia 771, 27.8 of 30 blobs found, against faiss.Kmeans's 1.68 s, inertia 1346, 24.8 of 30
    Z = np.ascontiguousarray(Z, dtype=np.float32)
    if backend == "faiss":
        import faiss

        km = faiss.Kmeans(Z.shape[1], k, niter=iters, seed=int(seed) % (1 << 31), verbose=False, nredo=3,
                          max_points_per_centroid=1 << 20, min_points_per_centroid=1)
        km.train(Z)
        _, lab = km.index.search(Z, 1)
        return lab[:, 0].astype(np.int64), km.centroids.astype(np.float32)
    if backend != "numpy":
        raise AlignmentError(f"k-means backend must be 'numpy' or 'faiss', not {backend!r}")
    from alignment.csls import kmeans as csls_kmeans

    return csls_kmeans(Z, k, np.random.default_rng(seed), iters)


def cka_match(Ca, Cb, restarts: int = 10, seed: int = 0):
    """The permutation of Cb's rows that maximises linear CKA with Ca's: argmax_P tr(K_a P K_b P^T) with
    K the centred Gram matrices of the centres Ca (k, d), Cb (k, d). Returns (perm (k,), CKA at perm)."""
    from alignment.qap import match_classes

    def gram(C):
        C = C - C.mean(0)
        return C @ C.T

    Ka, Kb = gram(np.asarray(Ca, np.float64)), gram(np.asarray(Cb, np.float64))
    perm = match_classes(Ka, Kb, method="faq", restarts=restarts, seed=seed)
    cka = float((Ka * Kb[np.ix_(perm, perm)]).sum() / max(np.linalg.norm(Ka) * np.linalg.norm(Kb), 1e-30))
    return perm, cka


def cluster_start(A, B, clusters: int = 30, restarts: int = 30, sample: int = 10_000, qap_restarts: int = 4,
                  seed: int = 0):
    """Step 2 of the module doc. A (N1, d), B (N2, d). Returns (M (d, d) the averaged normalised
    cross-covariance, list of each restart's {"cka", "agree"}: agree = cosine of its cross-covariance with
    the average)."""
    rng = np.random.default_rng(seed)
    Ms, recs = [], []
    for _ in range(max(1, restarts)):
        xa = rng.permutation(len(A))[:sample]
        yb = rng.permutation(len(B))[:sample]
        la, Ca = kmeans(A[xa], clusters, int(rng.integers(1 << 30)))
        lb, Cb = kmeans(B[yb], clusters, int(rng.integers(1 << 30)))
        perm, cka = cka_match(Ca, Cb, qap_restarts, int(rng.integers(1 << 30)))
        w = np.sqrt(np.bincount(la, minlength=clusters) * np.bincount(lb, minlength=clusters)[perm])
        M = (Ca.T.astype(np.float64) * w) @ Cb[perm].astype(np.float64)
        Ms.append(M / max(np.linalg.norm(M), 1e-30))
        recs.append({"cka": round(cka, 4)})
    M = np.mean(Ms, axis=0)
    for r, Mr in zip(recs, Ms):
        r["agree"] = round(float((Mr * M).sum() / max(np.linalg.norm(M), 1e-30)), 4)
    return M, recs


def lap(AR, B):
    """Hungarian assignment maximising the summed inner products of AR (n1, d) and B (n2, d). Returns
    (rows, cols) of min(n1, n2) pairs."""
    from scipy.optimize import linear_sum_assignment

    S = AR.astype(np.float32) @ B.T.astype(np.float32)
    return linear_sum_assignment(S, maximize=True)


def _blocks(n1, n2, batch, rng):
    """Shuffled rows of both sides cut into paired blocks of at most ``batch`` rows."""
    px, py = rng.permutation(n1), rng.permutation(n2)
    nb = max(1, int(np.ceil(max(n1, n2) / batch)))
    return list(zip(np.array_split(px, nb), np.array_split(py, nb)))


def seeded_cross_cov(A, B, xi, yj, seeded):
    """Cross-covariance of the pairs (xi, yj) plus the known pairs at total weight len(xi)."""
    M = A[xi].T.astype(np.float64) @ B[yj].astype(np.float64)
    si, sj = seeded
    if len(si):
        M += (len(xi) / len(si)) * (A[si].T.astype(np.float64) @ B[sj].astype(np.float64))
    return M


def refine(A, B, R, rounds: int = 100, batch: int = 4096, seeded=(np.zeros(0, np.int64),) * 2, seed: int = 0,
           readout: bool = True, tol: float = 1e-2, patience: int = 3, max_seconds: float = 20.0):
    """Steps 3 and 4 of the module doc from the rotation R (d, d). Returns (R, history of (round, mean
    matched inner product, fraction of pairs that changed)). With batches smaller than a side the rounds
    stop once R moves less than ``tol`` (Frobenius / sqrt(d)) for ``patience`` rounds in a row; full batches
    once the assignment repeats or the matched similarity stops rising. No round starts after ``max_seconds``
    (Hungarian assignment is slow on low-rank clouds with many near ties: 3.3 s at 3,000 rows in 16-d)."""
    t_end = time.perf_counter() + max_seconds
    rng = np.random.default_rng(seed)
    n1, n2 = len(A), len(B)
    hist = []
    if readout:
        xs, ys = [], []
        for bx, by in _blocks(n1, n2, batch, rng):
            r, c = lap(A[bx] @ R, B[by])
            xs.append(bx[r])
            ys.append(by[c])
        xi, yj = np.concatenate(xs), np.concatenate(ys)
        R = polar(seeded_cross_cov(A, B, xi, yj, seeded))
    full = n1 <= batch and n2 <= batch
    prev, still, flat, best_sim = None, 0, 0, -np.inf
    for t in range(rounds):
        if time.perf_counter() > t_end:
            break
        bx = np.arange(n1) if n1 <= batch else np.sort(rng.choice(n1, batch, replace=False))
        by = np.arange(n2) if n2 <= batch else np.sort(rng.choice(n2, batch, replace=False))
        AR = A[bx] @ R
        r, c = lap(AR, B[by])
        xi, yj = bx[r], by[c]
        sim = float((AR[r] * B[yj]).sum(1).mean())
        changed = float(np.mean(prev != yj)) if prev is not None and full else float("nan")
        hist.append((t, round(sim, 5), round(changed, 4)))
        Rn = polar(seeded_cross_cov(A, B, xi, yj, seeded))
        step = float(np.linalg.norm(Rn - R) / np.sqrt(len(R)))
        R = Rn
        if full and prev is not None and changed == 0.0:
            break
        # full batches that cycle between assignments: stop once the matched similarity stops rising
        best_sim = max(best_sim, sim)
        flat = flat + 1 if sim <= best_sim - 1e-7 or (t and sim - hist[-2][1] < 1e-6) else 0
        if full and flat >= patience:
            break
        # random batches: stop once the map has stopped moving for ``patience`` rounds in a row
        still = still + 1 if step < tol else 0
        if not full and still >= patience:
            break
        prev = yj
    return R, hist


def assignment_score(A, B, R, sample: int = 2000, seed: int = 0) -> float:
    """Label-free quality of a rotation R (d, d) between A (N1, d) and B (N2, d): the mean inner product of
    the pairs of a Hungarian assignment of A R to B on held-out halves, after one Procrustes refit on the other
    halves (so that a rotation fitted to its own pairs gets no credit for that). Higher is better.

    The two halves of each side are random (``seed``); at most ``sample`` rows a half."""
    rng = np.random.default_rng(seed)
    pa, pb = rng.permutation(len(A)), rng.permutation(len(B))
    ha, hb = len(A) // 2, len(B) // 2
    fa, ea = pa[:ha][:sample], pa[ha:][:sample]
    fb, eb = pb[:hb][:sample], pb[hb:][:sample]
    r, c = lap(A[fa] @ R, B[fb])
    with blas_threads(1):
        R1 = polar(A[fa[r]].T.astype(np.float64) @ B[fb[c]].astype(np.float64))
    AR = A[ea] @ R1
    r, c = lap(AR, B[eb])
    return float((AR[r] * B[eb[c]]).sum(1).mean())


def match_rosetta(X, Y, dim: int | None = None, clusters: int = 30, restarts: int = 30, sample: int = 10_000,
                  rounds: int = 100, batch: int = 4096, qap_restarts: int = 4, seeds=None, normalize: bool = True,
                  rows_l2: bool = True, seed: int = 0, dense_max: int = 5_000_000, progress: bool = False,
                  **meta) -> MatchResult:
    """Pair-free rotation by the Rosetta recipe (module doc).

    Parameters
    ----------
    X : (N1, D1) ; Y : (N2, D2), rows in any order, no pairs; N1, N2 >= ``clusters``
    dim : shared dimension (default min(D1, D2, N1 - 1, N2 - 1))
    clusters, restarts, sample, qap_restarts : the cluster starts (k-means centres per side, how many
        restarts are averaged, rows per side each restart clusters, FAQ starts per QAP)
    rounds, batch : refinement rounds and the rows per side of each round's Hungarian assignment
    seeds : optional known pairs [(i, j), ...] (row i of X is row j of Y), weighted k / p in every fit
    normalize, rows_l2 : scale each side to unit total variance; centre and L2-normalise each row first
        (the paper's preprocessing; off: the Euclidean geometry of the raw embeddings)
    seed : random seed of the samples, k-means, QAP starts and batches
    dense_max : largest N1 * N2 of the final one-to-one assignment solved densely
    **meta : stored in the rotation's metadata

    Returns
    -------
    MatchResult whose ``score`` is :func:`assignment_score` of the answer and ``info`` holds each restart's
    CKA and agreement, the refinement history and timings.
    """
    from alignment.neighbours import assign, mutual_and_coupling

    t0 = time.perf_counter()
    prep = prepare(X, Y, dim, normalize, rows_l2=rows_l2)
    A, B = prep.A, prep.B
    n1, d = A.shape
    n2 = B.shape[0]
    if clusters < 2 or clusters > min(n1, n2):
        raise AlignmentError(f"clusters={clusters} needs 2 <= clusters <= the smaller side's {min(n1, n2)} rows; "
                             "pass fewer clusters")
    si, sj = check_seeds(seeds, n1, n2)
    timings = {}
    t = time.perf_counter()
    M, recs = cluster_start(A, B, clusters, restarts, sample, qap_restarts, seed)
    if len(si):
        M = M / max(np.linalg.norm(M), 1e-30) + seeded_cross_cov(A, B, si, sj, (si[:0], sj[:0])) / max(1, len(si))
    R0 = polar(M)
    timings["starts_s"] = time.perf_counter() - t
    t = time.perf_counter()
    R, hist = refine(A, B, R0, rounds, batch, (si, sj), seed)
    timings["refine_s"] = time.perf_counter() - t
    t = time.perf_counter()
    perm, _, cand = assign(A @ R, B, dense_max, 4, min(32, d), progress, force=(si, sj))
    mutual_rate, coupling = mutual_and_coupling(cand, n1, n2)
    timings["assign_s"] = time.perf_counter() - t
    t = time.perf_counter()
    score = assignment_score(A, B, R, seed=seed)
    timings["score_s"] = time.perf_counter() - t
    info = {"method": "rosetta", "n1": n1, "n2": n2, "dim": d, "clusters": clusters, "restarts": recs,
            "rounds_run": len(hist), "history": hist[-5:], "assignment_score": round(score, 5),
            "mutual_rate": float(mutual_rate), "seeds": int(len(si)),
            "timings": {k: round(v, 3) for k, v in timings.items()}, "seconds": round(time.perf_counter() - t0, 3)}
    rot = rotation_from(prep, R, "rosetta", 1.0, {**meta, "fit": {"rosetta": {
        k: v for k, v in info.items() if k not in ("restarts", "history")}}})
    return MatchResult(rot, perm, coupling, score, info)


def anneal_soft(A, B, R, taus=None, sub: int = 2000, iters: int = 20, updates: int = 2, seed: int = 0):
    """Deterministic annealing of the Wasserstein-Procrustes objective from the rotation R (d, d): for each
    temperature tau (high to low), ``updates`` times an entropic transport plan between random ``sub``-row
    samples of A R and B (Sinkhorn, ``iters`` scaling rounds, kernel exp(<a R, b> / tau)) and Procrustes on
    it. At a high temperature every row is matched softly to many, which smooths away the local optima the
    hard (Hungarian) rounds stop in: on MiniLM-L6 -> MPNet (CuPL, disjoint halves of 3,000) the hard rounds
    stopped at FOSCTTM 0.077 from the cluster start; the annealed ones from the profile start reached 0.0035
    with 16 temperatures from 0.5 to 0.005 (6 s), 1.9e-4 with 40 from 0.5 to 0.002 (15 s, the default), after
    the hard rounds. Returns R (d, d)."""
    rng = np.random.default_rng(seed)
    taus = np.geomspace(0.5, 0.002, 40) if taus is None else np.asarray(taus, float)
    R = np.asarray(R, np.float64)
    for tau in taus:
        xs = rng.permutation(len(A))[:sub]
        ys = rng.permutation(len(B))[:sub]
        a, b = A[xs].astype(np.float64), B[ys].astype(np.float64)
        for _ in range(updates):
            # Sinkhorn by hand: POT's ot.sinkhorn gives the same rotations (posed transposed, as its columns are
            # scaled first; tests/test_alignment_libraries.py) but costs ~10-25 % more here: 0.22-0.26 s against
            # 0.20 s a plan (2,000 rows, 20 rounds, the cost's product timed in both, eval/library_bench.py on 2
            # busy cores); the whole of anneal_soft (16 temperatures, 3,000 rows a side, d = 64, median of 3):
            # 9.9 s against 8.9 s (its marginal check every 10 rounds and a scaled copy of the kernel)
            S = (a @ R) @ b.T / tau
            S -= S.max()
            K = np.exp(S)
            u, v = np.ones(len(a)), np.ones(len(b))
            for _ in range(iters):
                u = 1.0 / np.maximum(K @ v, 1e-300)
                v = 1.0 / np.maximum(K.T @ u, 1e-300)
            R = polar(a.T @ ((u[:, None] * K) * v[None, :]) @ b).astype(np.float64)
    return R.astype(np.float32)
