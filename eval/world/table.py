"""The world's table: every text encoder x rotation over seeds (mean +- std), with the issue's targets
checked per seed. ``python -m eval world report`` runs ``world_report``; each seed's rows are kept as a JSON file
(reused while the seed's models are the same), so a killed report resumes at the next seed."""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np

from captioner.errors import CaptionerError
from captioner.world.setting import TRAIN_SCENES_ROTATIONS
from eval.world.chain import DEFAULT_ROTATIONS, ROTATIONS, TEXT_ENCODERS

# the text encoders of the report on the encoders trained on the train scenes only: the good-views JEPA and
# the two nulls (bad views, no training)
TRAIN_SCENES_TEXT = ["text-jepa", "ntp", "untrained"]

METRICS = (("matcher_accuracy", "matcher acc."), ("residual", "held-out residual"), ("r_at_1", "R@1 img->cap"),
           ("cider_x100", "CIDEr x100 (retrieval)"), ("cider_decoded_x100", "CIDEr x100 (decoder)"),
           ("zeroshot_mean", "zero-shot top-1 (mean of 5)"),
           ("zeroshot_proto_mean", "zero-shot + prototypes (mean of 5)"))


def _models_key(preset: str, seed: int, scenes: str = "all") -> str:
    """A hash of the seed's trained models (their world.json): rows made with other models are redone."""
    from captioner.world.models import META, read_meta, world_dir

    folder = world_dir(preset, seed, scenes)
    read_meta(folder, preset, seed, scenes)
    return hashlib.sha256((folder / META).read_bytes()).hexdigest()[:12]


def rows_key(preset: str, seed: int, text_keys=None, rotation_keys=None, random_rotations: int | None = None,
             scenes: str = "all") -> dict:
    """What one seed's rows depend on (its models' hash, the plan, the setting, the matcher's version): a
    kept seed-<seed>.json is reused only under the same key."""
    from alignment.pairfree import MATCHER_VERSION
    from captioner.world.setting import N_CAPTIONS, N_IMAGES, PRIOR
    from captioner.world.zeroshot import HEADS, PROTOTYPE_WEIGHT
    from eval.world.chain import DECODE_INPUT, DECODER, RANDOM_ROTATIONS

    train = scenes == "train"
    return {"models": _models_key(preset, seed, scenes),
            "text": list(text_keys or (TRAIN_SCENES_TEXT if train else TEXT_ENCODERS)),
            "rotations": list(rotation_keys or (TRAIN_SCENES_ROTATIONS if train else DEFAULT_ROTATIONS)),
            "prior": PRIOR, "n": [N_IMAGES, N_CAPTIONS], "decoder": DECODER, "decode_input": DECODE_INPUT,
            "prototype_weight": PROTOTYPE_WEIGHT, "zeroshot_heads": HEADS,
            "random_rotations": random_rotations or RANDOM_ROTATIONS, "matcher_version": MATCHER_VERSION}


def seed_rows(preset: str, seed: int, out: Path, device: str = "cpu", progress: bool = True,
              text_keys=None, rotation_keys=None, random_rotations: int | None = None,
              scenes: str = "all") -> list[dict]:
    """The rows of one seed (the world models trained on ``scenes``): from ``out/seed-<seed>.json`` when made with the same models, plan and matcher
    version (``rows_key``), else computed (``chain.run_seed`` + ``chain.cider``) and written."""
    from captioner.paths import atomic_write_json
    from captioner.world.setting import setting
    from eval.world.chain import cider, run_seed

    key = rows_key(preset, seed, text_keys, rotation_keys, random_rotations, scenes)
    path = out / f"seed-{seed}.json"
    if path.is_file():
        old = json.loads(path.read_text())
        if old.get("key") == key:
            return old["rows"]

    def show(r):
        if progress:
            print(f"[world] seed {seed} {r['text']:<10} {r['rotation']:<18} residual {r['residual']:.3f} "
                  f"R@1 {r['r_at_1']:.3f} zero-shot {r['zeroshot_mean']:.3f} ({r['fit_seconds']} s)", flush=True)

    t0 = time.time()
    st = setting(seed)
    rows = run_seed(st, preset, key["text"], key["rotations"], device=device, progress=show, decoder_dir=out,
                    random_rotations=key["random_rotations"], scenes=scenes)
    cider(rows, st.test)
    atomic_write_json(path, {"key": key, "rows": rows, "seconds": round(time.time() - t0, 1)})
    return rows


def _stat(vals) -> dict | None:
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return {"mean": float(np.mean(vals)), "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0,
            "n": len(vals)}


def aggregate(rows: list[dict]) -> list[dict]:
    """One entry per (text, rotation): mean / std / n over seeds of every metric and zero-shot attribute."""
    out = []
    for tk in TEXT_ENCODERS:
        for rk in ROTATIONS:
            rs = [r for r in rows if r["text"] == tk and r["rotation"] == rk]
            if not rs:
                continue
            ok = [r for r in rs if "error" not in r]
            e = {"text": tk, "rotation": rk, "seeds": [r["seed"] for r in ok],
                 "errors": [r["error"] for r in rs if "error" in r]}
            for m, _ in METRICS:
                e[m] = _stat([r.get(m) for r in ok])
            for z in ("zeroshot", "zeroshot_proto"):
                attrs = ok[0].get(z, {}) if ok else {}
                e[z] = {a: _stat([r[z][a] for r in ok if z in r]) for a in attrs}
            out.append(e)
    return out


# the pair-free rotations fitted on disjoint scenes that the targets are checked for
DISJOINT = ("pairfree-disjoint", "lattice-disjoint", "lattice-estimated", "auto-disjoint")


def _in_world_order(attrs) -> list:
    """The attribute names in the world's order (a JSON round trip of the results may sort the keys)."""
    from captioner.world.setting import ATTRIBUTES

    return sorted(attrs, key=lambda a: ATTRIBUTES.index(a) if a in ATTRIBUTES else len(ATTRIBUTES))


def targets(rows: list[dict]) -> dict:
    """The issue's targets, per seed and per pair-free rotation on disjoint scenes (``DISJOINT``): the text
    JEPA's CIDEr >= 95% of paired and every attribute's zero-shot top-1 within 2 points of paired; NTP (both)
    and untrained at the random floor: CIDEr and mean zero-shot of no seed above the random rotations' mean
    + 2 std (over seeds x random rotations); ``within`` also records the two-sided band, ``mean_met`` the
    table's reading (the seeds' mean not above that limit)."""
    def get(tk, rk, s):
        return next((r for r in rows if r["text"] == tk and r["rotation"] == rk and r["seed"] == s
                     and "error" not in r), None)

    seeds = sorted({r["seed"] for r in rows})
    jepa = []
    for rk in DISJOINT:
        for s in seeds:
            p, f = get("text-jepa", "paired", s), get("text-jepa", rk, s)
            if p and f:
                gaps = {a: f["zeroshot"][a] - p["zeroshot"][a] for a in _in_world_order(p["zeroshot"])}
                cider_ok = f["cider_x100"] >= 0.95 * p["cider_x100"]
                j = {"rotation": rk, "seed": s, "cider_ratio": f["cider_x100"] / max(p["cider_x100"], 1e-9),
                     "zeroshot_gap": gaps, "met": bool(cider_ok and min(gaps.values()) >= -0.02)}
                if "zeroshot_proto" in p and "zeroshot_proto" in f:
                    gp = {a: f["zeroshot_proto"][a] - p["zeroshot_proto"][a] for a in _in_world_order(p["zeroshot_proto"])}
                    j.update({"zeroshot_gap_proto": gp, "met_proto": bool(cider_ok and min(gp.values()) >= -0.02)})
                jepa.append(j)
    floor = {}
    for rk in DISJOINT:
        for tk in ("ntp", "ntp-last", "untrained"):
            for m in ("cider_x100", "zeroshot_mean", "zeroshot_proto_mean"):
                rnd = [r[m] for r in rows if r["text"] == tk and r["rotation"] == "random" and m in r]
                pf = [r[m] for r in rows if r["text"] == tk and r["rotation"] == rk and m in r]
                if len(rnd) > 1 and pf:
                    mu, sd = float(np.mean(rnd)), float(np.std(rnd, ddof=1))
                    # at the floor: no seed above the random rotation's mean + 2 std (below it is no alignment
                    # either); "within" says whether every seed is also inside the two-sided band
                    floor[f"{rk}/{tk}/{m}"] = {"rotation": rk, "random_mean": mu, "random_std": sd, "pairfree": pf,
                                               "met": bool(all(v <= mu + 2 * sd for v in pf)),
                                               "mean_met": bool(np.mean(pf) <= mu + 2 * sd),
                                               "within": bool(all(abs(v - mu) <= 2 * sd for v in pf))}
    return {"text_jepa_pairfree_vs_paired": jepa, "baselines_at_random_floor": floor}


def report_dir(preset: str, scenes: str = "all") -> Path:
    """The report's default folder (rows, decoders, results): ``<home>/world/report-<preset>``, with ``-train``
    for the encoders trained on the train scenes only."""
    from captioner.paths import home

    return home() / "world" / (f"report-{preset}" + ("" if scenes == "all" else f"-{scenes}"))


def default_jobs(device: str, n_seeds: int) -> int:
    """Seeds computed at once by default: one a core (at most one a seed) on the CPU, one on an accelerator."""
    import os

    return max(1, min(n_seeds, os.cpu_count() or 1)) if device == "cpu" else 1


def _seed_rows_in_worker(args) -> list[dict]:
    """``seed_rows`` in a worker process that uses one core (torch's and BLAS's threads set to 1)."""
    import torch

    torch.set_num_threads(1)
    return seed_rows(*args)


def _all_seed_rows(preset: str, seeds, jobs: int, *rest) -> list[dict]:
    """Every seed's rows, in seed order: ``jobs`` seeds at once in worker processes (spawned with one BLAS
    thread each, so two jobs on two cores do not fight over them), or in this process with ``jobs`` 1 or one
    seed. ``rest``: ``seed_rows``'s arguments after the seed. A seed is written to its JSON as soon as it is
    done, so a killed report keeps the finished ones."""
    import os
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    per = [(preset, int(s), *rest) for s in seeds]
    if jobs <= 1 or len(per) <= 1:
        return [r for a in per for r in seed_rows(*a)]
    names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    saved = {k: os.environ.get(k) for k in names}
    os.environ.update({k: "1" for k in names})       # read by the spawned workers' numpy and torch at import
    try:
        with ProcessPoolExecutor(max_workers=min(jobs, len(per)), mp_context=get_context("spawn")) as pool:
            return [r for rows in pool.map(_seed_rows_in_worker, per) for r in rows]
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def world_report(preset: str = "lab", seeds=(0, 1, 2), out=None, device: str = "cpu", progress: bool = True,
                 text_keys=None, rotation_keys=None, random_rotations: int | None = None, scenes: str = "all",
                 jobs: int | None = None) -> dict:
    """Rows for every seed (missing models: a one-line error naming the training command), the aggregate,
    the targets; written as results.json and world.md in ``out`` (default ``<home>/world/report-<preset>``,
    ``report-<preset>-train`` for the encoders trained on the train scenes only: ``scenes`` "train").
    ``random_rotations``: random rotations per seed for the floor (default ``chain.RANDOM_ROTATIONS``);
    ``jobs``: seeds computed at once in worker processes (default ``default_jobs``: one a core on the CPU)."""
    from captioner.paths import atomic_write_json
    from captioner.world.setting import disjoint_sides, setting

    if not seeds:
        raise CaptionerError("world report: give at least one seed")
    from captioner.world.models import check_scenes, read_meta, world_dir

    check_scenes(scenes)
    out = Path(out) if out else report_dir(preset, scenes)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    for s in seeds:      # missing models: the one-line error now, not from inside a worker
        read_meta(world_dir(preset, int(s), scenes), preset, int(s), scenes)
    jobs = default_jobs(device, len(seeds)) if jobs is None else jobs
    if jobs < 1:
        raise CaptionerError(f"world report: --jobs must be 1 or more, not {jobs}")
    rows = _all_seed_rows(preset, seeds, jobs, out, device, progress, text_keys, rotation_keys, random_rotations,
                          scenes)
    res = {"preset": preset, **({} if scenes == "all" else {"scenes": scenes}), "seeds": [int(s) for s in seeds],
           "rows": [{k: v for k, v in r.items() if k not in ("captions", "decoded")} for r in rows],
           "table": aggregate(rows), "targets": targets(rows), "seconds_this_call": round(time.time() - t0, 1)}
    res["examples"] = _examples(rows)
    res["disjoint_sides"] = {str(s): disjoint_sides(setting(int(s))) for s in seeds}
    atomic_write_json(out / "results.json", res)
    (out / "world.md").write_text(format_table(res) + "\n")
    return res


def _examples(rows: list[dict], n: int = 3) -> list[dict]:
    """The first ``n`` test captions of seed 0's text JEPA under the paired and the disjoint pair-free maps."""
    got = {r["rotation"]: r["captions"] for r in rows if r["text"] == "text-jepa" and r["seed"] == rows[0]["seed"]
           and "captions" in r}
    return [{k: got[k][i] for k in ("paired", *DISJOINT) if k in got} for i in range(n)] if got else []


def _cell(st: dict | None, scale: float = 1.0, nd: int = 3) -> str:
    if st is None:
        return "-"
    return f"{st['mean'] * scale:.{nd}f} +- {st['std'] * scale:.{nd}f}"


def format_table(res: dict) -> str:
    """Markdown: the main table, zero-shot per attribute for the text JEPA, and the targets."""
    n = len(res["seeds"])
    on = "" if res.get("scenes", "all") == "all" else f", encoders trained on the {res['scenes']} scenes only"
    lines = [f"World preset `{res['preset']}`{on}, seeds {res['seeds']} (mean +- std over {n}).", "",
             "| text encoder | rotation | " + " | ".join(lab for _, lab in METRICS) + " |",
             "| --- | --- | " + " | ".join("---:" for _ in METRICS) + " |"]
    for e in res["table"]:
        cells = [_cell(e[m], 1.0, 1 if m.startswith("cider") else 3) for m, _ in METRICS]
        lab = ROTATIONS[e["rotation"]][3] + (f" ({len(e['errors'])} failed)" if e["errors"] else "")
        if e["rotation"] == "random" and e["cider_x100"] and e["cider_x100"]["n"] > len(res["seeds"]):
            lab += f" ({e['cider_x100']['n']} draws)"
        lines.append(f"| {TEXT_ENCODERS[e['text']][0]} | {lab} | " + " | ".join(cells) + " |")
    attrs = next((_in_world_order(e["zeroshot"]) for e in res["table"] if e["zeroshot"]), [])
    lines += ["", "Zero-shot top-1 per attribute (text JEPA):", "",
              "| rotation | " + " | ".join(attrs) + " |", "| --- | " + " | ".join("---:" for _ in attrs) + " |"]
    for z, tail in (("zeroshot", ""), ("zeroshot_proto", " + prototypes")):
        for e in res["table"]:
            if e["text"] == "text-jepa" and e.get(z):
                lines.append(f"| {ROTATIONS[e['rotation']][3]}{tail} | " + " | ".join(_cell(e[z][a]) for a in attrs)
                             + " |")
    t = res["targets"]
    lines += ["", "Targets (per seed):"]
    for j in t["text_jepa_pairfree_vs_paired"]:
        worst = min(j["zeroshot_gap"].items(), key=lambda kv: kv[1])
        lines.append(f"- seed {j['seed']}: text JEPA {ROTATIONS[j['rotation']][3]} CIDEr = "
                     f"{100 * j['cider_ratio']:.1f}% of "
                     f"paired (target >= 95%); worst zero-shot gap {worst[0]} {100 * worst[1]:+.1f} points "
                     f"(target >= -2) -> {'met' if j['met'] else 'MISSED'}")
        if "zeroshot_gap_proto" in j:
            worst = min(j["zeroshot_gap_proto"].items(), key=lambda kv: kv[1])
            lines.append(f"  with prototypes: worst zero-shot gap {worst[0]} {100 * worst[1]:+.1f} points -> "
                         f"{'met' if j['met_proto'] else 'MISSED'}")
    for k, f in t["baselines_at_random_floor"].items():
        vals = ", ".join(f"{v:.3f}" for v in f["pairfree"])
        lines.append(f"- {k.split('/', 1)[1]} {ROTATIONS[f['rotation']][3]} {vals} vs random "
                     f"{f['random_mean']:.3f} +- {f['random_std']:.3f} (target: not above random + 2 std) -> "
                     f"{'met' if f['met'] else 'MISSED'}" + ("" if f.get("within", True) or not f["met"] else
                                                            " (below the two-sided band)")
                     + ("" if "mean_met" not in f else f"; mean of the seeds {np.mean(f['pairfree']):.3f} -> "
                        f"{'met' if f['mean_met'] else 'MISSED'}"))
    lines += _sides_lines(res.get("disjoint_sides"))
    return "\n".join(lines)


def _sides_lines(sides: dict | None) -> list[str]:
    """Why the disjoint setting can fail: per seed, how alike the two sides' attribute frequencies are."""
    if not sides:
        return []
    lines = ["", "Do the two sides of the disjoint setting show the same world? Without pairs an attribute's values "
             "are told apart only by their frequencies (`python -m eval experiment world-disjoint`):"]
    for seed, d in sides.items():
        worst = max(d["tv"], key=d["tv"].get)
        differ = [a for a, ok in d["mode_agrees"].items() if not ok]
        lines.append(f"- seed {seed}: effective scenes {d['images']['effective_scenes']:.1f} (renders) / "
                     f"{d['captions']['effective_scenes']:.1f} (captions); largest frequency gap {d['max_tv']:.2f} "
                     f"(total variation, {worst}); most frequent value differs for "
                     + (", ".join(differ) if differ else "no attribute"))
    return lines


def world_section() -> str | None:
    """The latest ``python -m eval world report`` table as a Markdown section (for ``python -m eval report``), or None
    when no world report exists under the home."""
    from captioner.paths import home

    found = sorted((home() / "world").glob("report-*/results.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        return None
    res = json.loads(found[-1].read_text())
    scenes = "" if res.get("scenes", "all") == "all" else f" --scenes {res['scenes']}"
    return (f"## The JEPA world (`python -m eval world report --preset {res['preset']} --seeds "
            f"{','.join(map(str, res['seeds']))}{scenes}`)\n\n" + format_table(res))
