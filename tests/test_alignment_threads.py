"""The matcher's thread helpers: work split between Python threads gives the single-thread answers, and the
free-core count does not take this process's own threads for load."""
import numpy as np

from alignment._checks import _own_runnable, blas_threads, in_parallel, work_threads
from alignment.neighbours import matmul_rows, mutual_neighbours
from alignment.pairfree import _sign_search


def test_in_parallel_keeps_order():
    assert in_parallel([lambda i=i: i * i for i in range(5)], 2) == [0, 1, 4, 9, 16]
    assert in_parallel([lambda: 7], 2) == [7]
    assert in_parallel([], 2) == []


def test_matmul_rows_is_the_product():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((101, 7)).astype(np.float32)
    B = rng.standard_normal((7, 5)).astype(np.float32)
    with blas_threads(1):
        ref = A @ B
    for t in (1, 2, 3):
        np.testing.assert_allclose(matmul_rows(A, B, t), ref, rtol=1e-5, atol=1e-5)
    assert matmul_rows(A[:1], B, 2).shape == (1, 5)


def test_mutual_split_matches_one_thread():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((300, 16)).astype(np.float32)
    order = rng.permutation(300)[:150]
    B = A[order] + 0.01 * rng.standard_normal((150, 16)).astype(np.float32)
    one = mutual_neighbours(B, A, 1)
    assert one[3] == 1.0 and (one[1] == order[one[0]]).all()  # every query finds its source, mutually
    for t in (2, 3):
        got = mutual_neighbours(B, A, t)
        assert got[3] == one[3]
        np.testing.assert_array_equal(got[0], one[0])
        np.testing.assert_array_equal(got[1], one[1])
        # squared distances as |a|^2 + |b|^2 - 2ab in float32: blocking changes the rounding by about
        # eps * |a|^2 (1.2e-7 x 32 = 4e-6 here; a clean-clone run saw 3.8e-6 on 11 of 150 rows)
        np.testing.assert_allclose(got[2], one[2], rtol=1e-5, atol=2e-5)


def test_sign_search_split_matches_one_thread():
    rng = np.random.default_rng(2)
    Ar = rng.standard_normal((200, 6)).astype(np.float32)
    sgn = np.array([1, -1, 1, 1, -1, -1], np.float32)
    Bq = Ar[:50] * sgn
    p1, s1 = _sign_search(Ar, Bq, 1)
    p2, s2 = _sign_search(Ar, Bq, 2)
    np.testing.assert_array_equal(p1, p2)
    np.testing.assert_array_equal(s1, s2)
    assert (p1[np.argmin(s1)] == sgn).all()  # the flip that made Bq scores best (distance 0)


def test_own_runnable_counts_this_thread(monkeypatch):
    assert _own_runnable() >= 1  # the caller itself is running
    import alignment._checks as ch

    # the run queue holds only this process's threads: every core is free
    monkeypatch.setattr(ch, "_own_runnable", lambda: 3)
    real_open = open

    def fake_open(path, *a, **k):
        if path == "/proc/loadavg":
            import io

            return io.StringIO("0.1 0.1 0.1 3/100 1\n")
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", fake_open)
    import os

    assert work_threads() == (os.cpu_count() or 1)
    monkeypatch.setattr(ch, "_own_runnable", lambda: 1)  # two other processes runnable
    assert work_threads() == max(1, (os.cpu_count() or 1) - 2)


def test_matcher_repeat_against_a_copy_of_itself(tmp_path):
    """The interleaved timing script on a small problem, against a renamed copy of this very package: the
    same answers, exact."""
    import re
    import shutil
    from pathlib import Path

    import alignment
    from eval.experiments.matcher_repeat import run

    src = Path(alignment.__file__).parent
    dst = tmp_path / "alignment_main"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    for f in dst.glob("*.py"):
        f.write_text(re.sub(r"\bfrom alignment\.", "from alignment_main.", f.read_text()))
    out = run(str(tmp_path), n=600, dim=16, reps=2)
    assert out["perms_identical"] is True
    assert out["accuracy"] == {"new": 1.0, "base": 1.0}
