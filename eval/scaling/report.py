"""The scaling study's Markdown report (``results.md``) from ``run_scaling``'s result."""
from __future__ import annotations

import math


def _f(x, nd=3):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-" if x is None else str(x)
    return f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def _ratio_lines(method: str, r: dict | None, b: dict | None) -> list[str]:
    """The equal-alignment ratio and the bound of one baseline (``method``: ntp or ntp-last), as text."""
    name = {"ntp": "NTP", "ntp-last": "NTP (last token)"}.get(method, method)
    lines: list[str] = []
    if r:
        lines.append("")
        if not r.get("ntp_learned", True):
            lines.append(f"{name}: at its best alignment ({r['alignment']:.3f} at n={r['n_ntp']}) not every seed is "
                         "above its smallest-n point's mean + 2 seed std: it learned no measurable alignment "
                         "in this range, so there is no equal-alignment sample ratio (a larger budget is needed).")
        else:
            lines.append(f"{name}: equal alignment {r['alignment']:.3f} (its best, reached at n={r['n_ntp']}): the JEPA "
                         f"power law reaches it at n={_f(r['n_jepa'], 0)}"
                         + (" (extrapolated below the smallest n)" if r["jepa_extrapolated"] else "")
                         + f" -> sample ratio {name} / JEPA = {_f(r['ratio_ntp_over_jepa'], 1)}x.")
            lr = r.get("logistic")
            if lr:
                lines.append(f"Through the JEPA's logistic law: n={_f(lr['n_jepa'], 0)}"
                             + (" (extrapolated below the smallest n)" if lr["jepa_extrapolated"] else "")
                             + f" -> sample ratio {name} / JEPA = {_f(lr['ratio_ntp_over_jepa'], 1)}x.")
            li = r.get("interpolated")
            if li:
                lines.append("Interpolated between the JEPA's measured points (no law): "
                             + (f"n={li['n_jepa']:.0f} -> sample ratio {name} / JEPA = {li['ratio_ntp_over_jepa']:.1f}x."
                                if li["n_jepa"] else "outside the JEPA's measured range."))
                if len(li.get("by_n", [])) > 1:
                    lines.append(f"The same at each {name} point past its floor band: " + "; ".join(
                        f"n={c['n_ntp']} ({c['alignment']:.3f}): {c['ratio']:.0f}x" for c in li["by_n"]) + ".")
        o = r["ntp_samples_for_jepa_best"]
        lines.append(f"JEPA's best {o['alignment']:.3f} at n={o['n_jepa']}: the {name} power law "
                     + (f"needs n={o['n_ntp']:.3g} ({o['ratio']:.3g}x)." if o["ratio"] else
                        f"never reaches it (a_inf = {r['ntp_a_inf']:.3f})."))
    if b:
        lines.append(f"Bound from the measured points (no fit): the JEPA clears {b['level']:.3f} ({name}'s best + 2 x "
                     f"the largest seed std) at n={b['n_jepa']} ({b['jepa_mean']:.3f}); {name} stays below it up to "
                     f"n={b['n_ntp_max']} -> sample ratio {name} / JEPA > {b['ratio_greater_than']:.0f}x there.")
    return lines


def format_table(res: dict) -> str:
    """Markdown: the mean +- std table per (method, n), the fits, held-out predictions and the ratio."""
    cfg = res["config"]
    methods = list(res["methods"])
    ns = sorted({p["n"] for m in methods for p in res["methods"][m]["points"]})
    lines = [f"Mutual {cfg['k']}-NN with the image JEPA on {cfg['n_test']} held-out scene-lab pairs "
             f"(mean +- std over {len(cfg['seeds'])} seeds; chance {res['chance_mutual_knn']:.3f}).", "",
             "| samples seen | " + " | ".join(methods) + " |", "| ---: | " + " | ".join("---:" for _ in methods) + " |"]
    for n in ns:
        cells = []
        for m in methods:
            p = [q for q in res["methods"][m]["points"] if q["n"] == n]
            cells.append(f"{p[0]['mean']:.3f} +- {p[0]['std']:.3f}" if p else "-")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += ["", "| method | law | fit (all n) | held-out n | predicted | measured | abs error | seed std | error / std |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for m in methods:
        e = res["methods"][m]
        laws = [("power", e.get("fit_all", {}), e.get("holdout", {}))]
        if "logistic" in e:
            laws.append(("logistic", e["logistic"].get("fit_all", {}), e["logistic"].get("holdout", {})))
        for law, fa, h in laws:
            if "a_inf" in fa:
                fit = f"a_inf {fa['a_inf']:.3f}, b {fa['b']:.3g}, c {fa['c']:.3f}"
            elif "n50" in fa:
                fit = f"n50 {fa['n50']:.3g}, c {fa['c']:.3f}"
            else:
                fit = fa.get("error", "-")
            if "predicted" in h:
                lines.append(f"| {m} | {law} | {fit} | {h['n']} | {h['predicted']:.3f} | {h['measured']:.3f} | "
                             f"{h['abs_error']:.3f} | {_f(h['seed_std'])} | {_f(h['error_over_std'], 1)} |")
            else:
                lines.append(f"| {m} | {law} | {fit} | - | - | - | - | - | - |")
    lines += ["", "Laws: power a(n) = a_inf - b n^-c; logistic a(n) = lo + (hi - lo) / (1 + (n50 / n)^c) with lo = "
              f"chance ({res['chance_mutual_knn']:.3f}) and hi = the ceiling "
              + (f"({res['mutual_knn_ceiling']:.3f}, the latents vs a rotation of them + 1% noise)"
                 if res.get("mutual_knn_ceiling") is not None else "(not given: no logistic fit)")
              + " fixed, not fitted. Held out: each law fitted without the largest n, then asked for it."]
    for name, base in (res.get("baselines") or {"ntp": res}).items():
        lines += _ratio_lines(name, base.get("ratio"), base.get("ratio_bound"))
    lines.append(f"\nPlot: {res.get('plot', '-')}")
    return "\n".join(lines)
