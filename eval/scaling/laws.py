"""The scaling laws as pure functions: the saturating power law and the logistic in log n (fits and
inverses), held-out predictions, the model-free ratio bound and the NTP / JEPA sample ratio from a set of
run results (``analyse``). Numpy and scipy only."""
from __future__ import annotations

import math

import numpy as np

from eval.scaling.config import METHODS, ScalingConfig


def power_law(n, a_inf, b, c):
    """a(n) = a_inf - b * n^-c."""
    return a_inf - b * np.power(np.asarray(n, np.float64), -c)


def fit_power_law(ns, ys, sigma=None, a_max: float = 1.0) -> dict:
    """Least-squares fit of a(n) = a_inf - b n^-c (scipy.optimize.curve_fit, bounded: 0 <= a_inf <= a_max,
    b >= 0, 0.01 <= c <= 3; a_max = 1 because alignment scores are at most 1).

    n is rescaled by its smallest value inside the fit, so b refers to n_min and the problem stays well
    conditioned; the returned ``b`` is converted back to the original n.

    Parameters
    ----------
    ns : (M,) sample counts; ys : (M,) alignments (repeated n allowed, e.g. one point per seed).
    sigma : optional (M,) standard deviations (curve_fit's ``sigma``).

    Returns
    -------
    dict(a_inf, b, c, rmse) ; raises ValueError with fewer than 3 distinct n.
    """
    from scipy.optimize import curve_fit

    ns = np.asarray(ns, np.float64)
    ys = np.asarray(ys, np.float64)
    if len(np.unique(ns)) < 3:
        raise ValueError(f"need >= 3 distinct sample counts to fit 3 parameters, got {sorted(set(ns.tolist()))}")
    n0 = ns.min()
    x = ns / n0
    top = float(ys.max())
    p0 = (min(a_max, top + 0.05), max(1e-3, top + 0.05 - float(ys[np.argmin(ns)])), 0.5)
    (a, bs, c), _ = curve_fit(power_law, x, ys, p0=p0, sigma=sigma, bounds=([0.0, 0.0, 0.01], [a_max, np.inf, 3.0]),
                              maxfev=20000)
    rmse = float(np.sqrt(np.mean((power_law(x, a, bs, c) - ys) ** 2)))
    return {"a_inf": float(a), "b": float(bs * n0 ** c), "c": float(c), "rmse": rmse}


def logistic_law(n, n50, c, lo, hi):
    """a(n) = lo + (hi - lo) / (1 + (n50 / n)^c): a logistic in log n from ``lo`` (few samples) to ``hi``
    (many), half way at ``n50``, with slope ``c`` in log n."""
    x = np.log(np.asarray(n, np.float64)) - math.log(n50)
    return lo + (hi - lo) / (1.0 + np.exp(-c * x))


def fit_logistic_law(ns, ys, lo: float, hi: float, sigma=None) -> dict:
    """Least-squares fit of ``logistic_law`` with its floor ``lo`` and ceiling ``hi`` given, not fitted:
    two free parameters, n50 and c (scipy.optimize.curve_fit, bounded: n50 within e^10 of the measured
    range, 0.05 <= c <= 10).

    The floor and ceiling are what the world fixes before any run: chance mutual k-NN (an encoder that
    knows nothing) and the score of a perfect representation (``scenelab.mutual_knn_ceiling``). Between
    them the curve starts slowly, rises and flattens under the ceiling: the S in log n that the saturating
    power law (``power_law``, no floor) cannot follow.

    Returns dict(n50, c, lo, hi, rmse); raises ValueError with fewer than 2 distinct n or lo >= hi.
    """
    import warnings

    from scipy.optimize import OptimizeWarning, curve_fit

    ns = np.asarray(ns, np.float64)
    ys = np.asarray(ys, np.float64)
    if len(np.unique(ns)) < 2:
        raise ValueError(f"need >= 2 distinct sample counts to fit 2 parameters, got {sorted(set(ns.tolist()))}")
    if not lo < hi:
        raise ValueError(f"the law's floor ({lo}) must be below its ceiling ({hi})")
    ln = np.log(ns)

    def f(ln_n, l50, c):
        return lo + (hi - lo) / (1.0 + np.exp(-c * (ln_n - l50)))

    # start where the measured points cross half way (or the middle of the range)
    half = lo + 0.5 * (hi - lo)
    l0 = float(ln[np.argmin(np.abs(ys - half))]) if ys.max() > half > ys.min() else float(np.median(ln))
    with warnings.catch_warnings():    # a flat curve leaves the covariance undefined: only the fit is used
        warnings.simplefilter("ignore", OptimizeWarning)
        (l50, c), _ = curve_fit(f, ln, ys, p0=(l0, 1.0), sigma=sigma, maxfev=20000,
                                bounds=([ln.min() - 10.0, 0.05], [ln.max() + 10.0, 10.0]))
    rmse = float(np.sqrt(np.mean((f(ln, l50, c) - ys) ** 2)))
    return {"n50": float(math.exp(l50)), "c": float(c), "lo": float(lo), "hi": float(hi), "rmse": rmse}


def samples_for_logistic(alignment: float, fit: dict) -> float:
    """Inverse of ``logistic_law``: the n at which ``fit`` reaches ``alignment`` (0 at or below its floor,
    inf at or above its ceiling)."""
    lo, hi = fit["lo"], fit["hi"]
    if alignment <= lo:
        return 0.0
    if alignment >= hi:
        return math.inf
    return float(fit["n50"] * ((alignment - lo) / (hi - alignment)) ** (1.0 / fit["c"]))


def samples_for(alignment: float, fit: dict) -> float:
    """Inverse of the law: the n at which ``fit`` reaches ``alignment`` (inf if it never does)."""
    gap = fit["a_inf"] - alignment
    if gap <= 0:
        return math.inf
    return float((fit["b"] / gap) ** (1.0 / fit["c"]))


def _holdout(fit, law, xs, ys, by_n) -> dict:
    """Fit on every n but the largest with ``fit(xs, ys)``, predict the largest with ``law(n, **params)``
    and set the error beside the seed spread there."""
    n_max = max(xs)
    small = [(x, y) for x, y in zip(xs, ys) if x < n_max]
    f = fit([x for x, _ in small], [y for _, y in small])
    pred = float(law(n_max, f))
    meas = by_n[n_max]
    spread = float(np.std(meas, ddof=1)) if len(meas) > 1 else float("nan")
    err = abs(pred - float(np.mean(meas)))
    return {"fit_on": sorted({x for x, _ in small}), "n": n_max, "fit": f, "predicted": pred,
            "measured": float(np.mean(meas)), "abs_error": err, "seed_std": spread,
            "error_over_std": err / spread if spread > 0 else None}


def _fit_and_holdout(fit, law, xs, ys, by_n) -> dict:
    """{"fit_all": ``fit`` on every point, "holdout": ``_holdout``}; a fit that fails gives {"error": ...}."""
    res = {}
    for key, make in (("fit_all", lambda: fit(xs, ys)), ("holdout", lambda: _holdout(fit, law, xs, ys, by_n))):
        try:
            res[key] = make()
        except (ValueError, RuntimeError) as e:
            res[key] = {"error": str(e)}
    return res


def analyse(cfg: ScalingConfig, runs: list[dict], ceiling: float | None = None) -> dict:
    """Fits, held-out predictions, seed spreads and the NTP / JEPA sample ratio from the run results.

    Two laws per method: the saturating power law (``fit_all`` / ``holdout``) and, when the world's
    mutual k-NN ``ceiling`` is given, the logistic in log n from chance to that ceiling (``logistic``:
    its own ``fit_all`` / ``holdout``)."""
    out: dict = {"methods": {}}
    chance = cfg.k / (cfg.n_test - 1)
    for m in cfg.methods:
        rs = [r for r in runs if r["method"] == m]
        ns = sorted({r["n"] for r in rs})
        by_n = {n: [r["mutual_knn"] for r in rs if r["n"] == n] for n in ns}
        table = [{"n": n, "mean": float(np.mean(v)), "std": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0,
                  "min": float(np.min(v)), "seeds": len(v)} for n, v in by_n.items()]
        entry: dict = {"points": table}
        xs = [r["n"] for r in rs]
        ys = [r["mutual_knn"] for r in rs]
        entry.update(_fit_and_holdout(fit_power_law, lambda n, f: power_law(n, f["a_inf"], f["b"], f["c"]),
                                      xs, ys, by_n))
        if ceiling is not None:
            entry["logistic"] = _fit_and_holdout(
                lambda a, b: fit_logistic_law(a, b, chance, ceiling),
                lambda n, f: logistic_law(n, f["n50"], f["c"], f["lo"], f["hi"]), xs, ys, by_n)
        out["methods"][m] = entry
    good = "text-jepa"
    out["baselines"] = {}
    for bad in METHODS:     # every baseline of the registry that this config measured
        if bad != good and good in out["methods"] and bad in out["methods"]:
            out["baselines"][bad] = _ratios(out["methods"][good], out["methods"][bad])
    if "ntp" in out["baselines"]:       # the baseline (mean-pooled NTP), at the top level too
        out.update(out["baselines"]["ntp"])
    return out


def interpolate_n(points: list[dict], alignment: float) -> float | None:
    """The n at which the measured means first reach ``alignment``, interpolated linearly in log n
    between the two points around it (no law); None outside the measured range."""
    pts = sorted(points, key=lambda p: p["n"])
    for p, q in zip(pts, pts[1:]):
        if p["mean"] < alignment <= q["mean"]:
            t = (alignment - p["mean"]) / (q["mean"] - p["mean"])
            return float(math.exp(math.log(p["n"]) + t * (math.log(q["n"]) - math.log(p["n"]))))
    if pts and pts[0]["mean"] == alignment:
        return float(pts[0]["n"])
    return None


def _ratios(g: dict, b: dict) -> dict:
    """The ratio bound and, where the baseline learned, the sample ratio at equal alignment, from the
    JEPA's analysis entry ``g`` and the baseline's ``b`` (see ``analyse``)."""
    out: dict = {"ratio_bound": ratio_bound(g["points"], b["points"])}
    fg, fb = g.get("fit_all", {}), b.get("fit_all", {})
    pts_b = b["points"]
    if not ("a_inf" in fg and "a_inf" in fb and pts_b):
        return out
    best = max(pts_b, key=lambda p: p["mean"])   # the best alignment the baseline reached, and where
    target, n_bad = best["mean"], best["n"]
    n_good = samples_for(target, fg)
    n_min = g["points"][0]["n"]
    # the baseline must have learned something for "equal alignment" to mean anything: at its best n
    # every seed has to clear its smallest-n point's band (mean + 2 seed std); else no finite ratio.
    # The band is the floor's own spread: seeds that take off at different budgets (a spread at the
    # best point) have all learned, where a bump that one seed stays under is noise
    learned = learned_above_floor(pts_b, best)
    ratio = n_bad / n_good if n_good > 0 and math.isfinite(n_good) and learned else None
    r = {"alignment": target, "n_ntp": n_bad, "n_jepa": n_good, "ratio_ntp_over_jepa": ratio,
         "ntp_learned": learned, "jepa_extrapolated": bool(n_good < n_min),
         "ntp_a_inf": fb["a_inf"], "jepa_a_inf": fg["a_inf"]}
    lg = g.get("logistic", {}).get("fit_all", {})
    if "n50" in lg:     # the same ratio through the JEPA's logistic law
        nl = samples_for_logistic(target, lg)
        r["logistic"] = {"n_jepa": nl, "jepa_extrapolated": bool(nl < n_min),
                         "ratio_ntp_over_jepa": n_bad / nl if learned and 0 < nl < math.inf else None}
    # and with no law: where the JEPA's measured means cross the target
    ni = interpolate_n(g["points"], target)
    r["interpolated"] = {"n_jepa": ni, "ratio_ntp_over_jepa": n_bad / ni if learned and ni else None}
    # the same at every baseline point past its floor band: the ratio as a function of the alignment level
    curve = []
    for p in sorted(pts_b, key=lambda p: p["n"]):
        nj = interpolate_n(g["points"], p["mean"]) if learned_above_floor(pts_b, p) else None
        if nj:
            curve.append({"n_ntp": p["n"], "alignment": p["mean"], "n_jepa": nj, "ratio": p["n"] / nj})
    r["interpolated"]["by_n"] = curve
    # the other way round too: samples the baseline's fitted law needs for the JEPA's best alignment
    tg = g["points"][-1]
    nb = samples_for(tg["mean"], fb)
    r["ntp_samples_for_jepa_best"] = {"alignment": tg["mean"], "n_jepa": tg["n"], "n_ntp": nb,
                                      "ratio": nb / tg["n"] if math.isfinite(nb) else None}
    out["ratio"] = r
    return out


def learned_above_floor(points: list[dict], best: dict) -> bool:
    """Whether a method learned alignment by its ``best`` point: every seed there (its ``min``) is above
    the smallest-n point's mean + 2 x that point's seed std. ``points``: per-n {"n", "mean", "std",
    "min"} (``min`` defaults to the mean)."""
    first = min(points, key=lambda p: p["n"])
    if best is first:
        return False
    band = first["mean"] + 2 * max(first["std"], 1e-12)
    return bool(best.get("min", best["mean"]) > band)


def ratio_bound(good: list[dict], bad: list[dict]) -> dict | None:
    """A model-free lower bound on the sample ratio, from the measured points alone (no fit).

    ``good`` / ``bad``: the per-n points ({"n", "mean", "std"}) of the JEPA and of NTP. The alignment
    level is the highest NTP mean plus twice the largest seed std of either method; the first JEPA n
    whose mean clears it is ``n_good``. NTP stayed below that level at every n up to its largest,
    ``n_bad``, so NTP needs more than ``n_bad`` samples where the JEPA needed ``n_good``: ratio >
    n_bad / n_good. None when no JEPA point clears the level.
    """
    if not good or not bad:
        return None
    noise = max(p["std"] for p in good + bad)
    level = max(p["mean"] for p in bad) + 2 * noise
    above = [p for p in sorted(good, key=lambda p: p["n"]) if p["mean"] > level]
    if not above:
        return None
    n_bad = max(p["n"] for p in bad)
    return {"level": float(level), "n_jepa": int(above[0]["n"]), "jepa_mean": float(above[0]["mean"]),
            "n_ntp_max": int(n_bad), "ratio_greater_than": n_bad / above[0]["n"]}
