"""Real-data benchmark of the pair-free matchers: problems whose answer is known, built from what installs
offline (run by ``python -m eval align bench --real``).

A problem is two encoders A and B and a pool of items (sentences or images). Rows of X are A's embeddings of
some items, rows of Y are B's embeddings of some items, shuffled; a matcher sees only X and Y. Two settings:

* ``same``: the same items on both sides, shuffled apart (a matcher can find the correspondence itself);
* ``disjoint``: two disjoint halves of the pool (no item on both sides: what a user with their own images and
  someone else's text has).

Every map is scored on ``test`` held-out items embedded by both encoders (never seen by a matcher):
FOSCTTM (:func:`alignment.metrics.foscttm`; 0 perfect, 0.5 chance), R@1 and mean rank of the partner among
the test rows, and, in the ``same`` setting, the fraction of fit rows the matcher paired with their own item.
Beside each matcher, on every row: the paired oracle (Procrustes on the true pairs of the same fit rows) and
chance (FOSCTTM 0.5, R@1 1 / test).

Pools:

* text: ``cupl`` (CuPL's descriptive sentences of the ImageNet classes, clip-benchmark), and the caption
  texts of ``tuxpaint``, ``gcompris`` and ``openclipart`` (unique sentences of every split);
* images: ``images`` (every image of openclipart, GCompris, Tux Paint and emoji), or one of those sets;
* ``world``: the JEPA world's renders and captions (image JEPA vs text JEPA), when ``captioner world train``
  has trained the seed;
* ``synthetic``: the Rosetta paper's kinds of synthetic problems (:func:`synthetic_problem`).

Embeddings come from ``captioner.cache.embed`` (computed once, then read from ``$CAPTIONER_HOME``).
"""
from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass

import numpy as np

TEXT_POOLS = ("cupl", "tuxpaint", "gcompris", "openclipart")
IMAGE_SETS = ("openclipart", "gcompris", "tuxpaint", "emoji")


@dataclass
class Problem:
    """X (n1, D1) and Y (n2, D2) for a matcher (Y shuffled); the test pairs Xt[i] <-> Yt[i]; ``true[i]`` the
    row of Y holding X row i's item (-1 none: the disjoint setting); ``Xp``/``Yp``: the fit rows' true pairs
    for the oracle (in the disjoint setting, each side's other-encoder embeddings of its own items)."""
    name: str
    X: np.ndarray
    Y: np.ndarray
    true: np.ndarray
    Xt: np.ndarray
    Yt: np.ndarray
    Xp: np.ndarray
    Yp: np.ndarray
    meta: dict


# ----------------------------------------------------------------------------------------------- pools
def text_pool(name: str) -> list[str]:
    """Unique sentences of a text pool, in a fixed order (shuffled by the problem's seed later)."""
    if name == "cupl":
        from captioner.assets import cupl_prompts

        out = [s.strip() for sents in cupl_prompts().values() for s in sents]
    elif name in ("tuxpaint", "gcompris", "openclipart"):
        from captioner.datasets import get_dataset

        out = [c.strip() for split in ("train", "val", "test") for c in get_dataset(name, split).captions()]
    else:
        from captioner.errors import CaptionerError

        raise CaptionerError(f"unknown text pool {name!r}; known: {', '.join(TEXT_POOLS)}")
    seen, uniq = set(), []
    for s in out:
        if s and s.lower() not in seen:
            seen.add(s.lower())
            uniq.append(s)
    return uniq


def image_pool(name: str = "images"):
    """(ids, sources) of an image pool: ``images`` (all four sets) or one of ``IMAGE_SETS``."""
    from captioner.datasets import get_dataset

    sets = IMAGE_SETS if name == "images" else (name,)
    ids, srcs = [], []
    for ds_name in sets:
        splits = ("all",) if ds_name in ("tuxpaint", "emoji") else ("train", "val", "test")
        for split in splits:
            for s in get_dataset(ds_name, split).samples:
                ids.append(f"{ds_name}:{s.id}")
                srcs.append(s.source)
    return ids, srcs


def _embed(encoder: str, pool: str, items: list, ids: list[str], modality: str, progress: bool):
    """(ids encoded, embeddings (n, D)) of the pool's items through the keyed cache (one cache per encoder and
    pool slice: the dataset name and its content hash are in the key). Unreadable images are skipped."""
    from captioner.cache import embed
    from captioner.datasets import CaptionDataset, Sample

    if modality == "text":
        samples = [Sample(i, None, [t]) for i, t in zip(ids, items)]
    else:
        samples = [Sample(i, src, []) for i, src in zip(ids, items)]
    ds = CaptionDataset(f"pool-{pool}", f"n{len(items)}", samples)
    es = embed(encoder, ds, modality, progress=progress)
    return list(es.sample_ids), es.X.astype(np.float32)


def pool_embeddings(pool: str, encoders: tuple[str, ...], n_max: int, seed: int = 0, progress: bool = False):
    """{encoder: (n, D)} for the first ``n_max`` items of the pool in the seed's order, the same rows for all
    encoders (items one of them could not encode are dropped), and the pool's size."""
    if pool in TEXT_POOLS:
        items = text_pool(pool)
        modality = "text"
        ids = [f"{pool}:{i}" for i in range(len(items))]
    else:
        ids, items = image_pool(pool)
        modality = "image"
    order = np.random.default_rng(seed).permutation(len(items))[:n_max]
    sel_items, sel_ids = [items[i] for i in order], [ids[i] for i in order]
    got = {e: _embed(e, pool, sel_items, sel_ids, modality, progress) for e in encoders}
    common = set(sel_ids)
    for rows, _ in got.values():
        common &= set(rows)
    keep = [i for i in sel_ids if i in common]
    out = {}
    for e, (rows, X) in got.items():
        at = {r: k for k, r in enumerate(rows)}
        out[e] = X[[at[i] for i in keep]]
    return out, len(items)


# ----------------------------------------------------------------------------------------------- problems
def split_problem(name: str, EA: np.ndarray, EB: np.ndarray, n: int, setting: str, test: int, seed: int = 0,
                  meta: dict | None = None) -> Problem:
    """A problem from paired embeddings EA[i] <-> EB[i] of one pool: the last ``test`` rows are the test
    pairs; the fit rows are the first n (``same``: both sides, Y shuffled) or two disjoint blocks of n."""
    rng = np.random.default_rng(seed + 1)
    m = len(EA)
    need = (n if setting == "same" else 2 * n) + test
    if need > m:
        raise ValueError(f"{name}: {setting} with n={n} and test={test} needs {need} items, the pool has {m}")
    Xt, Yt = EA[m - test:], EB[m - test:]
    if setting == "same":
        xa, yb = np.arange(n), np.arange(n)
    elif setting == "disjoint":
        xa, yb = np.arange(n), np.arange(n, 2 * n)
    else:
        raise ValueError(f"setting must be 'same' or 'disjoint', not {setting!r}")
    order = rng.permutation(n)  # Y row j holds item yb[order[j]]
    Y = EB[yb][order]
    true = np.full(n, -1, np.int64)
    if setting == "same":
        true[order] = np.arange(n)
    return Problem(name, EA[xa], Y, true, Xt, Yt, EA[xa], EB[xa],
                   {"setting": setting, "n": n, "test": test, "seed": seed, **(meta or {})})


def synthetic_problem(kind: str, n: int, setting: str, test: int = 1000, seed: int = 0) -> Problem:
    """The Rosetta paper's kinds of synthetic problems, written from its description (not its code):

    * ``clustered``: a mixture of 10 Gaussian clusters in 16 dimensions (cluster spread 0.3 of the centres'),
      mapped into 24 dimensions by a random semi-orthogonal map (16 -> 24), small noise on Y;
    * ``blobs``, ``cube`` (uniform), ``spiral``: low-dimensional clouds (3-d) embedded in 32 dimensions by a
      random semi-orthogonal map on each side (the low-rank GW benchmarks' shapes). The cube has symmetries
      (its rotation is not identifiable from the cloud alone): no matcher can beat chance there by geometry.
    """
    rng = np.random.default_rng(1000 + seed)
    m = (n if setting == "same" else 2 * n) + test

    def semi(d_in, d_out):
        return np.linalg.qr(rng.standard_normal((d_out, d_in)))[0].T  # (d_in, d_out), W W^T = I

    if kind == "clustered":
        C = rng.standard_normal((10, 16)) * 2.0
        Z = C[rng.integers(10, size=m)] + 0.3 * 2.0 * rng.standard_normal((m, 16))
        EA = Z
        EB = Z @ semi(16, 24) + 0.01 * rng.standard_normal((m, 24))
    elif kind in ("blobs", "cube", "spiral"):
        if kind == "blobs":
            C = rng.standard_normal((5, 3)) * 3.0 * np.array([1.0, 0.7, 0.4])
            Z = C[rng.integers(5, size=m)] + rng.standard_normal((m, 3)) * 0.5
        elif kind == "cube":
            Z = rng.uniform(-1, 1, size=(m, 3))
        else:
            t = rng.uniform(0, 3 * np.pi, size=m)
            Z = np.column_stack([t * np.cos(t), t * np.sin(t), 0.5 * t]) + 0.05 * rng.standard_normal((m, 3))
        EA = Z @ semi(3, 32)
        EB = Z @ semi(3, 32) + 0.001 * rng.standard_normal((m, 32))
    else:
        raise ValueError(f"unknown synthetic kind {kind!r}; known: clustered, blobs, cube, spiral")
    return split_problem(f"synthetic {kind}", EA.astype(np.float32), EB.astype(np.float32), n, setting, test, seed,
                         {"pool": f"synthetic-{kind}", "a": "X", "b": "Y"})


# ----------------------------------------------------------------------------------------------- scoring
def _pre(Z, mean):
    Z = Z - mean
    return Z / np.maximum(np.linalg.norm(Z, axis=1, keepdims=True), 1e-12)


def heldout_scores(transform, P: Problem) -> dict:
    """FOSCTTM, R@1 and mean rank of a map on the problem's test pairs, in Y's preprocessed space (centred by
    Y's fit mean, rows L2-normalised: cosine geometry, as the Rosetta paper scores)."""
    from alignment.metrics import foscttm

    my = P.Y.mean(0)
    Q, K = _pre(transform(P.Xt), my), _pre(P.Yt, my)
    S = Q @ K.T
    rank = (S > S[np.arange(len(S)), np.arange(len(S))][:, None]).sum(1) + 1
    return {"foscttm": float(foscttm(Q, K)), "R@1": float((rank == 1).mean()), "mean_rank": float(rank.mean())}


def oracle_map(P: Problem):
    """Procrustes on the true pairs of the fit rows, in the Rosetta preprocessing (centre + row L2)."""
    mx, my = P.Xp.mean(0), P.Yp.mean(0)
    A, B = _pre(P.Xp, mx), _pre(P.Yp, my)
    W = _semi(A.T.astype(np.float64) @ B.astype(np.float64))
    y0 = P.Y.mean(0)  # heldout_scores centres on the matcher's Y mean: land there
    return lambda Z: (Z - mx) @ W + y0


def _semi(M):
    U, _, Vt = np.linalg.svd(M, full_matrices=False)
    return (U @ Vt).astype(np.float32)  # (D1, D2), semi-orthogonal


def run_problem(P: Problem, methods=("ours", "rosetta", "multistart", "auto"), seed: int = 0,
                progress: bool = False) -> dict:
    """Every matcher on one problem, with the oracle and chance: a dict of rows ready for JSON."""
    from alignment.pairfree import match
    from eval.matcher_bench import PeakRSS

    out = {"problem": P.name, **P.meta, "n1": len(P.X), "n2": len(P.Y), "d1": P.X.shape[1], "d2": P.Y.shape[1],
           "oracle": heldout_scores(oracle_map(P), P),
           "chance": {"foscttm": 0.5, "R@1": 1.0 / len(P.Xt), "mean_rank": (len(P.Xt) + 1) / 2}, "methods": {}}
    for m in methods:
        t = time.perf_counter()
        try:
            with PeakRSS() as mem:
                res = match(P.X, P.Y, method=m, seed=seed)
        except Exception as e:  # a matcher that refuses a problem is a row, not the end of the benchmark
            out["methods"][m] = {"error": f"{type(e).__name__}: {e}"}
            continue
        row = heldout_scores(res.rotation.transform, P)
        row.update(seconds=round(time.perf_counter() - t, 2), peak_rss_mb=mem.mb,
                   load_avg=round(os.getloadavg()[0], 2))
        if (P.true >= 0).any():
            row["match_accuracy"] = res.accuracy(P.true)
        if "auto" in res.info:
            row["chosen"] = res.info["auto"]["chosen"]
        elif "chosen" in res.info:
            row["chosen"] = res.info["chosen"]
        out["methods"][m] = row
        if progress:
            import sys

            print(f"  {P.name} [{P.meta.get('setting')}] {m}: FOSCTTM {row['foscttm']:.2e} ({row['seconds']:.1f} s)"
                  f" oracle {out['oracle']['foscttm']:.2e}", file=sys.stderr, flush=True)
    return out


# the real problems: (name, pool, encoder A, encoder B); text pools are embedded 10,000 items at most a pool
TEXT_PAIRS = [("minilm-l6", "minilm-l3"), ("minilm-l6", "mpnet"), ("minilm-l3", "mpnet")]
IMAGE_PAIRS = [("efficientnet-lite0", "efficientnet-lite2"), ("efficientnet-lite0", "efficientnet-lite1"),
               ("efficientnet-lite1", "efficientnet-lite2")]
POOL_MAX = 10_000


def problems(suite: str = "quick", n: int = 3000, test: int = 1000, settings=("same", "disjoint"),
             seed: int = 0, progress: bool = False):
    """Yield the problems of a suite. ``quick``: CuPL MiniLM-L6 -> L3 and the synthetic problems; ``cupl``: every
    text pair on CuPL; ``scale``: L6 -> L3 on disjoint CuPL halves of n rows (2,000 test pairs); ``text``: every
    text pair on every text pool; ``image``: every image pair on the image pool; ``cross``: Lite0 -> MiniLM-L6
    on Tux Paint (the infeasible control); ``synthetic``; ``all``."""
    suites = {"quick": ["cupl-l6-l3", "synthetic"], "cupl": ["cupl"], "scale": ["scale"], "text": ["text"],
              "image": ["image"],
              "cross": ["cross"], "synthetic": ["synthetic"], "all": ["text", "image", "cross", "synthetic"]}
    if suite not in suites:
        raise ValueError(f"unknown suite {suite!r}; known: {', '.join(suites)}")
    parts = suites[suite]

    def from_pool(pool, a, b, kind):
        E, _ = pool_embeddings(pool, (a, b), POOL_MAX, seed=seed, progress=progress)
        m = len(E[a])
        for setting in settings:
            t = min(test, m // 4)
            nn = min(n, (m - t) // (1 if setting == "same" else 2))
            yield split_problem(f"{pool} {a} -> {b}", E[a], E[b], nn, setting, t, seed,
                                {"pool": pool, "a": a, "b": b, "kind": kind})

    for part in parts:
        if part == "cupl-l6-l3":
            yield from from_pool("cupl", "minilm-l6", "minilm-l3", "text")
        elif part == "scale":  # n a side of disjoint CuPL halves (COCO's disjoint-half scale: 40,000)
            E, _ = pool_embeddings("cupl", ("minilm-l6", "minilm-l3"), 2 * n + 2000, seed=seed, progress=progress)
            yield split_problem("cupl minilm-l6 -> minilm-l3", E["minilm-l6"], E["minilm-l3"], n, "disjoint", 2000,
                                seed, {"pool": "cupl", "a": "minilm-l6", "b": "minilm-l3", "kind": "text"})
        elif part == "cupl":
            for a, b in TEXT_PAIRS:
                yield from from_pool("cupl", a, b, "text")
        elif part == "text":
            for pool in TEXT_POOLS:
                for a, b in TEXT_PAIRS:
                    yield from from_pool(pool, a, b, "text")
        elif part == "image":
            for a, b in IMAGE_PAIRS:
                yield from from_pool("images", a, b, "image")
        elif part == "cross":
            yield from _cross_tuxpaint(settings, seed)
        elif part == "synthetic":
            for kind in ("clustered", "blobs", "cube", "spiral"):
                for setting in settings:
                    yield synthetic_problem(kind, n, setting, test, seed)


def _cross_tuxpaint(settings, seed):
    """Lite0 images -> MiniLM-L6 captions of Tux Paint (each image with its first caption): the control that
    ``align diagnose`` calls infeasible."""
    from captioner.cache import embed
    from captioner.datasets import get_dataset

    ds = get_dataset("tuxpaint", "all")
    ei, et = embed("efficientnet-lite0", ds, "image", progress=False), embed("minilm-l6", ds, "text", progress=False)
    first = {}
    for i, s in enumerate(et.sample_ids):
        first.setdefault(s, i)
    keep = [i for i, s in enumerate(ei.sample_ids) if s in first]
    EA, EB = ei.X[keep], et.X[[first[ei.sample_ids[i]] for i in keep]]
    order = np.random.default_rng(seed).permutation(len(EA))
    EA, EB = EA[order], EB[order]
    m = len(EA)
    for setting in settings:
        t = m // 4
        nn = (m - t) // (1 if setting == "same" else 2)
        yield split_problem("tuxpaint efficientnet-lite0 -> minilm-l6", EA, EB, nn, setting, t, seed,
                            {"pool": "tuxpaint", "a": "efficientnet-lite0", "b": "minilm-l6", "kind": "image-text"})


def run(suite: str = "quick", n: int = 3000, test: int = 1000, methods=("ours", "rosetta", "multistart", "auto"),
        settings=("same", "disjoint"), seed: int = 0, progress: bool = False, out=None) -> dict:
    """Every problem of the suite under every matcher. ``out``: a JSON file rewritten after each problem, so an
    interrupted run keeps what it measured."""
    rows = []

    def result():
        return {"suite": suite, "n": n, "test": test, "methods": list(methods), "rows": rows,
                "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                            "load_avg_end": round(os.getloadavg()[0], 2)}}

    for P in problems(suite, n, test, settings, seed, progress):
        rows.append(run_problem(P, methods, seed, progress))
        if out:
            tmp = f"{out}.tmp"
            with open(tmp, "w") as f:
                json.dump(result(), f, indent=1)
            os.replace(tmp, out)
    return result()


def table(result: dict) -> str:
    """Markdown: one row per problem and setting, FOSCTTM of the oracle and of each matcher (seconds)."""
    ms = result["methods"]
    head = "| problem | setting | n | oracle | " + " | ".join(ms) + " | auto chose |"
    lines = [head, "|" + "---|" * (len(ms) + 5)]
    for r in result["rows"]:
        cells = []
        for m in ms:
            v = r["methods"].get(m, {})
            cells.append(v["error"][:30] if "error" in v else f"{v['foscttm']:.2e} ({v['seconds']:.0f} s)")
        chose = r["methods"].get("auto", {}).get("chosen", "")
        lines.append(f"| {r['problem']} | {r['setting']} | {r['n1']} | {r['oracle']['foscttm']:.2e} | "
                     + " | ".join(cells) + f" | {chose} |")
    lines.append("")
    lines.append("FOSCTTM on held-out test pairs (0 perfect, 0.5 chance); seconds per matcher; "
                 f"{result['machine']['cpus']} CPUs, load {result['machine']['load_avg_end']} at the end.")
    return "\n".join(lines)
