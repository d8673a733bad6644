"""Validate the pair-free feasibility verdict (``alignment.diagnose``) on cases whose answer is measured,
and the CKA table of every offline encoder pair on Tux Paint pairs.

Outcome of a case ("works"): the matcher's rotation retrieves each image's true partner (R@1 among all
text rows, by distance after mapping) at least half as often as the oracle rotation (Procrustes on the true
pairs), and above 3x chance. Cases: synthetic power-law clouds (Y = X Q + sigma rms(X) noise, optionally
half of Y replaced by new points) at rising sigma, independent clouds, and real encoder pairs on the Tux
Paint train split (image-text, and image-image / text-text pairs of offline encoders).

World cases (``--world PRESET``, where ``captioner world train --preset PRESET`` has trained seeds 0-2): the
JEPA world's "same scenes" draw (1,000 train renders drawn by the skewed prior, each with one of its captions,
shuffled apart), the world's image JEPA against each text encoder of the world report; a render's hit is a
caption of its own scene (scenes repeat, so the partner row itself is one of several right answers).

    python -m eval align diagnose-validate [--no-real] [--n 1000] [--world lab]
    python -m eval align cka-table [--split train]
"""
from __future__ import annotations

import os
import time

import numpy as np

SYNTHETIC = [(s, ov) for ov in (1.0, 0.5) for s in (0.0, 0.5, 0.8, 1.2, 1.6, 2.5, 4.0)]
REAL = [("efficientnet-lite0", "minilm-l6"), ("efficientnet-lite2", "mpnet"), ("efficientnet-lite1", "minilm-l3"),
        ("efficientnet-lite2", "minilm-l6"), ("efficientnet-lite0", "efficientnet-lite2"),
        ("efficientnet-lite0", "efficientnet-lite1"), ("minilm-l6", "minilm-l3"), ("minilm-l6", "mpnet")]
IMAGE_ENCODERS = ["efficientnet-lite0", "efficientnet-lite1", "efficientnet-lite2", "efficientnet-lite0@11",
                  "efficientnet-lite0@14"]
TEXT_ENCODERS = ["minilm-l6", "minilm-l3", "mpnet"]


def synthetic(n: int, d: int, noise: float, overlap: float, seed: int):
    """X (n, d), Y (n, d) shuffled, true (n,) with Y[true[i]] the partner of X[i] (-1: no partner)."""
    rng = np.random.default_rng(seed)
    lam = np.arange(1, d + 1, dtype=np.float64) ** -1.0
    basis = np.linalg.qr(rng.standard_normal((d, d)))[0]
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    X = (rng.standard_normal((n, d)) * np.sqrt(lam)) @ basis
    Y = X @ Q + noise * np.sqrt(lam.mean()) * rng.standard_normal((n, d))
    m = int(round((1 - overlap) * n))
    partner = np.arange(n)
    if m:
        Y[:m] = ((rng.standard_normal((m, d)) * np.sqrt(lam)) @ basis) @ Q
        partner[:m] = -1
    order = rng.permutation(n)
    inv = np.empty(n, np.int64)
    inv[order] = np.arange(n)
    true = np.where(partner >= 0, inv[np.arange(n)], -1)
    return X.astype(np.float32), Y[order].astype(np.float32), true


def _r1(M, Y, true, label=None) -> float:
    """R@1 of the mapped rows M among Y: the nearest Y row is the true partner (or, with ``label`` (len(Y),),
    a row of the partner's label)."""
    ok = true >= 0
    Mc, Yc = M - Y.mean(0), Y - Y.mean(0)
    D = (Mc ** 2).sum(1)[:, None] - 2 * Mc @ Yc.T + (Yc ** 2).sum(1)[None, :]
    near = D.argmin(1)[ok]
    if label is None:
        return float((near == true[ok]).mean())
    return float((label[near] == label[true[ok]]).mean())


def outcome(X, Y, true, seed: int = 0, label=None) -> dict:
    """Measured: the product's matcher's (``match(method="auto")``) R@1 vs the oracle's (Procrustes on the
    true pairs, in at most 32 principal dimensions: the in-sample reference of the 404-row Tux Paint cases) and
    chance; ``label`` (len(Y),): rows of one label are interchangeable answers (the world's scenes)."""
    from alignment.pairfree import match
    from alignment.procrustes import fit_procrustes

    ok = true >= 0
    res = match(X, Y, method="auto", seed=seed)
    dim = min(32, X.shape[1], Y.shape[1]) if min(X.shape[1], Y.shape[1]) > 32 else None
    oracle = fit_procrustes(X[ok], Y[true[ok]], dim=dim)
    r_m, r_o = _r1(res.rotation.transform(X), Y, true, label), _r1(oracle.transform(X), Y, true, label)
    if label is None:
        chance = 1.0 / len(Y)
    else:   # a random row has the partner's label this often
        _, inv, cnt = np.unique(label, return_inverse=True, return_counts=True)
        chance = float(np.mean(cnt[inv.ravel()[true[ok]]] / len(Y)))
    return {"r1": r_m, "oracle_r1": r_o, "chance": chance, "works": bool(r_m >= 0.5 * r_o and r_m > 3 * chance)}


def world_cases(preset: str = "lab", seeds=(0, 1, 2), n: int = 1000):
    """(name, "world", X, Y, true, scene label of each Y row) for each seed x text encoder of the world report."""
    from captioner.world.setting import setting
    from eval.world.chain import TEXT_ENCODERS as WORLD_TEXT
    from eval.world.chain import embed, world_name

    for seed in seeds:
        st = setting(seed)
        rows = st.same_images[:n]
        scene = np.array([st.train.samples[i].label for i in rows])
        X = embed(world_name("world-image-jepa", preset, seed), [st.train.samples[i].source() for i in rows])
        rng = np.random.default_rng(seed)
        caps = [st.train.samples[i].captions[int(rng.integers(len(st.train.samples[i].captions)))] for i in rows]
        order = np.random.default_rng(0).permutation(len(rows))
        inv = np.empty(len(rows), np.int64)
        inv[order] = np.arange(len(rows))
        for tk, (_, name) in WORLD_TEXT.items():
            Y = embed(world_name(name, preset, seed), caps)
            yield f"world {preset} seed {seed} image JEPA -> {tk}", "world", X, Y[order], inv, scene[order]


def _real_case(a: str, b: str):
    from captioner.cache import embed
    from captioner.datasets import get_dataset

    ds = get_dataset("tuxpaint", "train")
    ea, eb = (embed(e, ds, progress=False) for e in (a, b))
    rows = {s: i for i, s in enumerate(eb.sample_ids)}
    keep = [i for i, s in enumerate(ea.sample_ids) if s in rows]
    X = ea.X[keep]
    Y = eb.X[[rows[ea.sample_ids[i]] for i in keep]]
    order = np.random.default_rng(0).permutation(len(Y))
    inv = np.empty(len(Y), np.int64)
    inv[order] = np.arange(len(Y))
    return X, Y[order], inv


HELDOUT = [("minilm-l6", "minilm-l3"), ("minilm-l6", "mpnet"), ("minilm-l3", "mpnet")]


def heldout_cases(n: int = 1500, test: int = 1000):
    """(name, Problem) for the text encoder pairs of ``HELDOUT`` on CuPL sentences (eval.matcher_real): the
    same sentences shuffled apart, and disjoint halves (what a real user has); scored on held-out pairs."""
    from eval.matcher_real import POOL_MAX, pool_embeddings, split_problem

    for a, b in HELDOUT:
        E, _ = pool_embeddings("cupl", (a, b), POOL_MAX)
        for setting in ("same", "disjoint"):
            yield f"CuPL {setting} {n} {a} -> {b}", split_problem(f"{a}->{b}", E[a], E[b], n, setting, test)


def heldout_outcome(P, seed: int = 0) -> dict:
    """Measured on the problem's held-out pairs: the product's matcher's FOSCTTM vs the oracle's (Procrustes on
    the fit rows' true pairs); "works" when it is within the real-data target, max(10 x oracle, 1e-3)."""
    from alignment.pairfree import match
    from eval.matcher_real import heldout_scores, oracle_map

    res = match(P.X, P.Y, method="auto", seed=seed)
    f = heldout_scores(res.rotation.transform, P)["foscttm"]
    fo = heldout_scores(oracle_map(P), P)["foscttm"]
    return {"foscttm": f, "oracle_foscttm": fo, "works": bool(f <= max(10 * fo, 1e-3))}


def cases(n: int = 1000, real: bool = True):
    """(name, kind, X, Y, true) for every validation case (synthetic seeds 1.., not the tuning seed 0)."""
    for i, (s, ov) in enumerate(SYNTHETIC):
        yield (f"synthetic noise {s} overlap {ov:.0%}", "synthetic", *synthetic(n, 64, s, ov, seed=1 + i))
    rng = np.random.default_rng(99)
    for i in range(2):
        lam = np.arange(1, 65) ** -0.5
        X = (rng.standard_normal((n, 64)) * lam).astype(np.float32)
        Y = (rng.standard_normal((n, 64)) * lam).astype(np.float32)
        yield f"independent clouds #{i + 1}", "synthetic", X, Y, rng.permutation(n)
    if real:
        for a, b in REAL:
            yield f"tuxpaint train {a} -> {b}", "real", *_real_case(a, b)


def run(n: int = 1000, real: bool = True, restarts: int = 3, world: str | None = None, heldout: int = 0,
        out=None, progress: bool = False) -> dict:
    """Every case's signals, verdict and measured outcome; ``world``: also the world cases of that preset;
    ``heldout``: also the CuPL text cases (:func:`heldout_cases`) with that many sentences a side. ``out``:
    the JSON is rewritten there as each case finishes (a long run loses nothing on a crash)."""
    import itertools

    from alignment.diagnose import diagnose

    rows, t0 = [], time.time()

    def done(row):
        rows.append(row)
        if progress:
            print(f"[{time.time() - t0:.0f} s] {row['case']}: {row['verdict']}, works {row['works']}", flush=True)
        if out:
            from captioner.paths import atomic_write_json

            atomic_write_json(out, {"cases": rows, "partial": True})

    for name, P in (heldout_cases(heldout) if heldout else ()):
        d = diagnose(P.X, P.Y, pairs=None, restarts=restarts)
        o = heldout_outcome(P)
        done({"case": name, "kind": "heldout", "n": int(len(P.X)), **{k: d["unpaired"][k] for k in
              ("spectrum", "distances", "knn_graph", "stability", "surrogate_margin", "matcher_score",
               "surrogate_score")}, "unbiased_cka": None, "verdict": d["verdict"], "reason": d["reason"], **o,
              "agree": (d["verdict"] == "feasible") == o["works"]})
    plain = ((*c, None) for c in cases(n, real))
    for name, kind, X, Y, true, label in itertools.chain(plain, world_cases(world) if world else ()):
        ok = true >= 0
        d = diagnose(X, Y, pairs=None, restarts=restarts)
        pa = diagnose(X, Y, pairs=(X[ok], Y[true[ok]]), restarts=0, n_perm=10)["paired"] if kind == "real" else None
        o = outcome(X, Y, true, label=label)
        done({"case": name, "kind": kind, "n": int(len(X)), **{k: d["unpaired"][k] for k in
              ("spectrum", "distances", "knn_graph", "stability", "surrogate_margin", "matcher_score",
               "surrogate_score")}, "unbiased_cka": pa["unbiased_cka"]["score"] if pa else None,
              "verdict": d["verdict"], "reason": d["reason"], **o,
              "agree": (d["verdict"] == "feasible") == o["works"]})
    acc = float(np.mean([r["agree"] for r in rows]))
    return {"cases": rows, "accuracy": acc, "n_cases": len(rows), "seconds": round(time.time() - t0, 1),
            "loadavg": os.getloadavg()}


def table(res: dict) -> str:
    lines = ["| case | spectrum | distances | kNN graph | stability | surrogate margin | verdict | matcher (auto) | "
             "oracle | works | agree |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["cases"]:
        got, ref = ((f"FOSCTTM {r['foscttm']:.2g}", f"FOSCTTM {r['oracle_foscttm']:.2g}") if "foscttm" in r
                    else (f"{r['r1']:.3f}", f"{r['oracle_r1']:.3f}"))
        lines.append(f"| {r['case']} | {r['spectrum']:.2f} | {r['distances']:.2f} | {r['knn_graph']:.2f} | "
                     f"{r['stability']:.2f} | {r['surrogate_margin']:+.3f} | {r['verdict']} | {got} | "
                     f"{ref} | {'yes' if r['works'] else 'no'} | {'yes' if r['agree'] else 'NO'} |")
    lines.append(f"\nverdict agrees with the measured outcome on {sum(r['agree'] for r in res['cases'])} of "
                 f"{res['n_cases']} cases ({100 * res['accuracy']:.0f} %); {res['seconds']} s, load "
                 f"{tuple(round(v, 2) for v in res['loadavg'])}")
    return "\n".join(lines)


def cka_table(split: str = "train", images=None, texts=None, n_perm: int = 20) -> dict:
    """Paired CKA / unbiased CKA / mutual k-NN (z vs a permutation null) of every image x text encoder pair."""
    from alignment.diagnose import paired_signals
    from captioner.cache import embed, paired
    from captioner.datasets import get_dataset

    ds = get_dataset("tuxpaint", split)
    emb = {e: embed(e, ds, progress=False) for e in list(images or IMAGE_ENCODERS) + list(texts or TEXT_ENCODERS)}
    rows = []
    for a in images or IMAGE_ENCODERS:
        for b in texts or TEXT_ENCODERS:
            X, Y, sids = paired(emb[a], emb[b], reduce="mean")
            s = paired_signals(X, Y, n_perm=n_perm)
            rows.append({"image": a, "text": b, "n_pairs": len(sids), **s})
    best = max(rows, key=lambda r: r["unbiased_cka"]["score"])
    return {"split": f"tuxpaint/{split}", "rows": rows, "best": [best["image"], best["text"]]}


def cka_table_text(res: dict) -> str:
    lines = [f"Paired probe set: {res['split']} ({res['rows'][0]['n_pairs']} pairs; text row = mean of the "
             "sample's captions)", "", "| image encoder | text encoder | CKA | unbiased CKA (z) | mutual k-NN (null, z) |",
             "|---|---|---|---|---|"]
    for r in res["rows"]:
        u, m = r["unbiased_cka"], r["mutual_knn"]
        lines.append(f"| {r['image']} | {r['text']} | {r['cka']['score']:.3f} | {u['score']:.3f} ({u['z']:.1f}) | "
                     f"{m['score']:.3f} ({m['null_mean']:.3f}, {m['z']:.1f}) |")
    lines.append(f"\nbest pair by unbiased CKA: {res['best'][0]} + {res['best'][1]}")
    return "\n".join(lines)
