"""Input validation shared by the alignment modules: every public entry point calls these so that bad
input fails with a message naming the argument, the shape and the fix, not deep inside a BLAS call."""
from __future__ import annotations

import numpy as np

from alignment.errors import AlignmentError


def is_torch(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def to_numpy(x, name: str = "X") -> np.ndarray:
    """numpy view of an array-like (numpy, torch on any device, nested lists)."""
    if is_torch(x):
        x = x.detach().cpu().numpy()
    try:
        a = np.asarray(x)
    except Exception as e:  # ragged lists and the like
        raise AlignmentError(f"{name}: cannot be read as an array ({e})") from None
    if a.dtype == object or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)
                                 or a.dtype == bool):
        raise AlignmentError(f"{name}: expected a numeric array, got dtype {a.dtype}")
    return a


def as_matrix(x, name: str = "X", min_rows: int = 1, dtype=None, allow_constant: bool = False) -> np.ndarray:
    """Check that ``x`` is a finite (N, D) matrix with at least ``min_rows`` rows; return it as float.

    ``allow_constant=False`` also refuses a matrix whose rows are all identical (zero variance): every
    alignment quantity (covariances, neighbours, kernels) is undefined on it.
    """
    a = to_numpy(x, name)
    if a.ndim != 2:
        raise AlignmentError(f"{name}: expected a 2-D (N, D) array of embeddings, got shape {a.shape}")
    n, d = a.shape
    if n == 0 or d == 0:
        raise AlignmentError(f"{name}: empty array of shape {a.shape}; nothing to align")
    if n < min_rows:
        raise AlignmentError(f"{name}: needs at least {min_rows} rows, got {n}")
    if dtype is None:
        dtype = a.dtype if np.issubdtype(a.dtype, np.floating) else np.float64
    a = np.asarray(a, dtype=dtype)
    finite = np.isfinite(a).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise AlignmentError(f"{name}: {len(bad)} of {n} rows contain NaN or inf (first: row {bad[0]}); "
                             "drop or re-encode them")
    if not allow_constant and n > 1 and np.ptp(a, axis=0).max() == 0:
        raise AlignmentError(f"{name}: all {n} rows are identical; there is no structure to align "
                             "(was every input the same, or the encoder broken?)")
    return a


def check_pair(X, Y, names=("X", "Y"), same_dim: bool = False, min_rows: int = 1, dtype=None,
               allow_constant: bool = False):
    """Validate two matrices with the same number of rows (paired data)."""
    X = as_matrix(X, names[0], min_rows=min_rows, dtype=dtype, allow_constant=allow_constant)
    Y = as_matrix(Y, names[1], min_rows=min_rows, dtype=dtype, allow_constant=allow_constant)
    if X.shape[0] != Y.shape[0]:
        raise AlignmentError(f"{names[0]} has {X.shape[0]} rows but {names[1]} has {Y.shape[0]}; paired "
                             "inputs need one row per pair, in the same order")
    if same_dim and X.shape[1] != Y.shape[1]:
        raise AlignmentError(f"{names[0]} is {X.shape[1]}-dimensional but {names[1]} is {Y.shape[1]}-"
                             "dimensional; reduce both to a shared dimension first (dim=...)")
    return X, Y


def float_dtype(*arrays):
    """float64 if any input is float64, else float32 (embeddings are float32; keep them so for speed)."""
    return np.float64 if any(a.dtype == np.float64 for a in arrays) else np.float32


def blas_threads(n: int = 1):
    """Context limiting BLAS/LAPACK threads. Factorisations of d x d matrices (d <= ~1000) gain little from
    threads, and on a busy machine OpenBLAS's spinning threads make them 10-100x slower; so we run them
    on one thread. No-op without threadpoolctl (a scikit-learn dependency)."""
    try:
        return _controller().limit(limits=n, user_api="blas")
    except ImportError:
        import contextlib

        return contextlib.nullcontext()


_CONTROLLER: list = [None, -1]  # threadpoolctl's controller and len(sys.modules) when it listed the libraries


def _controller():
    """One ThreadpoolController, listed again when modules were imported since (a new extension may bring
    its own BLAS): listing the loaded libraries costs about 0.6 ms, a matcher call sets limits ~9 times."""
    import sys

    from threadpoolctl import ThreadpoolController

    if _CONTROLLER[0] is None or _CONTROLLER[1] != len(sys.modules):
        _CONTROLLER[0] = ThreadpoolController()
        _CONTROLLER[1] = len(sys.modules)
    return _CONTROLLER[0]


def in_parallel(fns, threads: int):
    """Call the functions ``fns`` (no arguments) and return their results in order: in up to ``threads``
    Python threads when ``threads`` >= 2 (numpy and LAPACK release the GIL in large operations), else one
    after the other. For independent pieces of work that each run best on one BLAS thread."""
    fns = list(fns)
    if threads < 2 or len(fns) < 2:
        return [f() for f in fns]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(threads, len(fns))) as ex:
        return [f.result() for f in [ex.submit(fn) for fn in fns]]


class torch_threads:
    """Context setting torch's intra-op threads (CPU) and restoring them after. Many small products (the
    IVF's cell-by-cell search) run several times faster on one thread than on two, and far faster on a
    busy machine, where a descheduled thread stalls every parallel region."""

    def __init__(self, n: int = 1):
        self.n = n

    def __enter__(self):
        import torch

        self.old = torch.get_num_threads()
        torch.set_num_threads(max(1, self.n))
        return self

    def __exit__(self, *exc):
        import torch

        torch.set_num_threads(self.old)


class faiss_threads:
    """Context setting faiss's OpenMP threads (its loops and its bundled OpenMP OpenBLAS, a runtime apart from
    torch's) and restoring them after; the k-NN searches of :mod:`alignment.nnsearch` run under it with
    torch's current count, so that :class:`torch_threads` around a search also bounds faiss."""

    def __init__(self, n: int = 1):
        self.n = n

    def __enter__(self):
        import faiss

        self.old = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(max(1, self.n))
        return self

    def __exit__(self, *exc):
        import faiss

        faiss.omp_set_num_threads(self.old)


def work_threads() -> int:
    """Threads for large products now: every core when no other process is runnable, else one less per
    runnable process (at least one). On a shared machine OpenBLAS / OpenMP threads that must wait for a
    descheduled partner run 2-10x slower than one thread (measured in docs/results/matcher.md); so the
    count follows the CPU share actually free (the run queue of /proc/loadavg, sampled a few times). This
    process's own runnable threads are not others: BLAS / OpenMP workers still spinning after the last
    product (they yield as soon as there is new work) used to read as load and halve the count."""
    import os
    import time

    cpus = os.cpu_count() or 1
    try:
        others = []
        for _ in range(3):
            with open("/proc/loadavg") as f:
                runnable = int(f.read().split()[3].split("/")[0])
            others.append(runnable - max(1, _own_runnable()))  # less this process's threads (this one too)
            time.sleep(0.001)
        return max(1, min(cpus, cpus - min(others)))
    except (OSError, ValueError, IndexError):
        return cpus


def _own_runnable() -> int:
    """How many of this process's threads are runnable now (state R in /proc/self/task/*/stat)."""
    import os

    n = 0
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/stat") as f:
                n += f.read().rpartition(")")[2].split()[0] == "R"
        except OSError:  # the thread ended meanwhile
            pass
    return n
