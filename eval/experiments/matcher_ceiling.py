"""Is the gap between the pair-free matcher and the oracle the matcher's fault, or the data's?

The robustness grid (``python -m eval align bench --noise 2.0``) compares the matcher's accuracy with the
oracle's: one-to-one assignment under the *true* rotation Q. A matcher never sees Q; it fits a rotation to the
data. On one grid point this experiment takes two answers to their fixed points of the alternation
"exact one-to-one assignment (``scipy.optimize.linear_sum_assignment``) -> Procrustes on every assigned pair",
the alternation every matcher here ends with:

- ``truth``: started from the Procrustes fit on the true pairs (what a matcher that had found the right
  matching would settle on);
- ``found``: started from the assignment ``alignment.pairfree.match(method="auto")`` returns.

For each it prints the accuracy, the matching cost (mean squared distance of the assigned pairs, in both
clouds' principal axes as the matchers see them: ``alignment.matching.prepare``) and the held-out score
``alignment.csls.heldout_score`` that "auto" ranks answers by. When ``found`` costs less and scores at
least as well held out as ``truth``, the data prefers the wrong answer: no matcher that minimises the
matching cost or ranks by that held-out score can do better on this problem, whatever its optimiser.

With ``--soft-em TAU``: the same two starts taken instead through EM with the matching summed out
(``soft_em``: a Sinkhorn-balanced soft assignment, then Procrustes on the expected pairs), the maximum
likelihood of the rotation when the matching is unknown, and each end point's free energy (``free_energy``:
-tau x that log-likelihood, up to a constant). When the truth's end point has the higher free energy, the
likelihood too prefers the found answer. TAU about 2 / dim (0.016 at d = 128) is the temperature that matches
the noise: the correct pairs' squared distance is the found cost, spread over dim coordinates.

Beside them, ``paired``: the accuracy of one-to-one assignment under the Procrustes rotation fitted on the
*known* pairs of a fresh draw of the same problem (same basis, Q and noise; ``--paired-n`` rows, N by
default): what a rotation estimated from that many true pairs reaches on rows it was not fitted on.

    python -m eval experiment matcher-ceiling [--n 2000] [--dim 128] [--noise 2.0 ...] [--overlap 1.0 ...]
        [--seed 0] [--json] [--out FILE]
"""
from __future__ import annotations

import os
import time

import click
import numpy as np

from eval.experiments import emit


def fixed_point(A, B, R, max_iter: int = 10):
    """Alternate exact assignment and Procrustes from rotation ``R`` until the assignment stops changing.
    Returns (R, perm, mean assigned squared distance, iterations)."""
    from scipy.optimize import linear_sum_assignment

    from alignment.matching import weighted_procrustes
    from alignment.neighbours import sqdist

    prev = None
    for it in range(1, max_iter + 1):
        D = sqdist((A @ R).astype(np.float32), B).numpy()
        r, c = linear_sum_assignment(D)
        perm = np.full(len(A), -1, np.int64)
        perm[r] = c
        cost = float(D[r, c].mean())
        if prev is not None and np.array_equal(perm, prev):
            break
        prev = perm
        R = weighted_procrustes(A[r], B[c])
    return R, perm, cost, it


def _balanced_plan(A, B, R, tau: float, rounds: int):
    """(log P, D): the Sinkhorn-balanced soft assignment exp(-D / tau) of A's rows to B's under rotation ``R``
    (every row and column summing to one; ``rounds`` row-and-column normalisations), D the squared distances."""
    from scipy.special import logsumexp

    from alignment.neighbours import sqdist

    D = sqdist((np.asarray(A, np.float64) @ R).astype(np.float32), np.asarray(B, np.float32)).numpy()
    D = D.astype(np.float64)
    L = -D / tau
    for _ in range(rounds):
        L -= logsumexp(L, 1, keepdims=True)
        L -= logsumexp(L, 0, keepdims=True)
    return L, D


def soft_em(A, B, R, tau: float, iters: int = 30, sinkhorn: int = 20):
    """Maximum likelihood over the unknown matching: EM from rotation ``R`` with the matching summed out
    (Sinkhorn-balanced soft assignment exp(-d^2 / tau), then Procrustes on the expected pairs). Returns R."""
    A64, B64 = np.asarray(A, np.float64), np.asarray(B, np.float64)
    for _ in range(iters):
        L, _ = _balanced_plan(A, B, R, tau, sinkhorn)
        U, _, Vt = np.linalg.svd(A64.T @ np.exp(L) @ B64)
        R = U @ Vt
    return R


def free_energy(A, B, R, tau: float, sinkhorn: int = 50) -> float:
    """The entropic matching cost min_P <P, D> - tau H(P) over doubly stochastic P (D: squared distances under
    rotation ``R``), per row: -tau x the log of the likelihood of ``R`` with the matching summed out (its
    Sinkhorn / Bethe approximation), up to a constant. Lower = likelier."""
    L, D = _balanced_plan(A, B, R, tau, sinkhorn)
    P = np.exp(L)
    return float(((P * D).sum() + tau * (P * L).sum()) / len(A))


def paired_accuracy(X, Y, true, n_fit: int, dim: int, noise: float, seed: int) -> float:
    """One-to-one assignment accuracy on (X, Y) under the Procrustes rotation fitted on ``n_fit`` true pairs
    drawn afresh from problem ``seed`` (same basis, Q and noise; full overlap)."""
    from alignment.procrustes import orthogonal_procrustes
    from eval.matcher_bench import make_problem, oracle

    X2, Y2, true2, _ = make_problem(n_fit, dim, noise=noise, seed=seed, draw_seed=10_000 + seed)
    R, _ = orthogonal_procrustes(X2.astype(np.float64), Y2[true2].astype(np.float64))
    return oracle(X, Y, true, R)["assignment"]


def run(n: int = 2000, dim: int = 128, noise: float = 2.0, overlap: float = 1.0, seed: int = 0,
        paired_n=None, soft_tau=None) -> dict:
    """One grid point; ``paired_n``: the sizes of the fresh paired draws of the "paired" column (default
    [n]), all measured against the same matcher answer; ``soft_tau``: temperatures (times the found fixed
    point's mean assigned squared distance) of :func:`soft_em` started from both answers."""
    from alignment.csls import heldout_score
    from alignment.matching import prepare, weighted_procrustes
    from alignment.pairfree import match
    from eval.matcher_bench import make_problem, oracle

    X, Y, true, Q = make_problem(n, dim, noise=noise, seed=seed, overlap=overlap)
    ok = true >= 0
    t = time.perf_counter()
    res = match(X, Y, method="auto")
    match_s = time.perf_counter() - t
    prep = prepare(X, Y, None, True)
    A, B = prep.A, prep.B
    out = {"n": n, "dim": dim, "noise": noise, "overlap": overlap, "seed": seed,
           "oracle": oracle(X, Y, true, Q)["assignment"],
           "paired": [{"n_fit": int(m), "accuracy": paired_accuracy(X, Y, true, int(m), dim, noise, seed)}
                      for m in (paired_n or [n])],
           "auto": {"accuracy": round(float((res.perm[ok] == true[ok]).mean()), 4),
                    "chosen": res.info.get("auto", {}).get("chosen", res.info.get("method")),
                    "seconds": round(match_s, 1)}}
    starts = {"truth": weighted_procrustes(A[ok], B[true[ok]]),
              "found": weighted_procrustes(A[res.perm >= 0], B[res.perm[res.perm >= 0]])}
    for name, R0 in starts.items():
        R, perm, cost, it = fixed_point(A, B, R0)
        out[name] = {"accuracy": round(float((perm[ok] == true[ok]).mean()), 4), "cost": round(cost, 5),
                     "heldout": round(float(heldout_score(A, B, perm)), 4), "iterations": it}
    for tau in soft_tau or []:
        for name, R0 in starts.items():
            R = soft_em(A, B, R0, tau * out["found"]["cost"])
            out.setdefault("soft_em", []).append({"tau": tau, "start": name,
                                                  "accuracy": oracle(A, B, true, R)["assignment"],
                                                  "free_energy": round(free_energy(A, B, R, tau * out["found"]["cost"]),
                                                                       6)})
    out["data_prefers_found"] = bool(out["found"]["cost"] < out["truth"]["cost"]
                                     and out["found"]["heldout"] >= out["truth"]["heldout"])
    return out


def table(rows) -> str:
    lines = ["| noise | overlap | oracle (true Q) | paired Procrustes, fresh pairs (n) | auto | truth's fixed point: "
             "acc / cost / held-out | found's fixed point: acc / cost / held-out | data prefers found |",
             "|---" * 8 + "|"]
    for r in rows:
        tr, fo = r["truth"], r["found"]
        paired = ", ".join(f"{p['accuracy']:.3f} ({p['n_fit']})" for p in r["paired"])
        lines.append(f"| {r['noise']} | {r['overlap']} | {r['oracle']:.3f} | {paired} | "
                     f"{r['auto']['accuracy']:.3f} | "
                     f"{tr['accuracy']:.3f} / {tr['cost']:.4f} / {tr['heldout']:.3f} | "
                     f"{fo['accuracy']:.3f} / {fo['cost']:.4f} / {fo['heldout']:.3f} | "
                     f"{'yes' if r['data_prefers_found'] else 'no'} |")
    soft = [(r, e) for r in rows for e in r.get("soft_em", [])]
    if soft:
        lines += ["", "| noise | overlap | EM temperature (x found's cost) | EM from | accuracy | free energy "
                  "(lower = likelier) |", "|---" * 6 + "|"]
        lines += [f"| {r['noise']} | {r['overlap']} | {e['tau']} | {e['start']} | {e['accuracy']:.4f} | "
                  f"{e['free_energy']:.6f} |" for r, e in soft]
    return "\n".join(lines)


@click.command("matcher-ceiling", help=__doc__)
@click.option("--n", type=int, default=2000, show_default=True)
@click.option("--dim", type=int, default=128, show_default=True)
@click.option("--noise", "noises", type=float, multiple=True, help="repeatable; default 2.0")
@click.option("--overlap", "overlaps", type=float, multiple=True, help="repeatable; default 1.0")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--paired-n", type=int, multiple=True,
              help="rows of the fresh paired draw the 'paired' column fits on (repeatable; default N)")
@click.option("--soft-em", type=float, multiple=True, metavar="TAU",
              help="also run EM with the matching summed out (soft assignment at temperature TAU x the found "
                   "fixed point's cost) from both answers (repeatable; ~80 s a value at N=2000)")
@click.option("--json", "as_json", is_flag=True, help="print only the JSON")
@click.option("--out", default=None, help="also write the JSON here")
def cli(n, dim, noises, overlaps, seed, paired_n, soft_em, as_json, out):
    rows = [run(n, dim, nz, ov, seed, list(paired_n) or None, list(soft_em) or None)
            for ov in (overlaps or [1.0]) for nz in (noises or [2.0])]
    res = {"rows": rows, "loadavg": [round(x, 2) for x in os.getloadavg()]}
    emit(res, out, as_json, table(rows))
