"""Wall time of a single-image ``captioner caption x.png`` (default options, and with the decoder) and of
``captioner --help``: today's code against an older revision in the same run, cold and warm.

The older revision (default: the parent of the commit that added ``captioner/threads.py``, i.e. the path
before the latency work) is checked out into a temporary git worktree and run with the same Python and the
same state. Both run on private copies of ``$CAPTIONER_HOME`` (which must hold a trained decoder: run one
``captioner caption`` first), so that nothing either writes is seen by the other:

- cold: the first call on a copy without what the latency work caches (``corpus/``, the decoder and text
  encoder ONNX exports and the export checks), so it builds them; for the old code the first call;
- warm: the calls after it (``--reps`` of them).

Prints JSON (``--json PATH`` also writes it) and a table, with the load average before and after each series.

    python bench/cli_latency.py --reps 5 [--image x.png] [--old-rev REV]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _git(*args) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout.strip()


def default_old_rev() -> str:
    first = _git("log", "--diff-filter=A", "--format=%H", "--", "captioner/threads.py").splitlines()
    return f"{first[-1]}~1" if first else "HEAD"


def _home_copy(src: Path, dst: Path) -> Path:
    """A copy of the state without the latency caches (so the first call of either code is cold)."""
    def skip(folder, names):
        if Path(folder).name == "onnx":
            return [n for n in names if n.endswith(".check.json") or n.startswith(("decoder-", "minilm-"))]
        return ["corpus"] if Path(folder) == src else []

    shutil.copytree(src, dst, ignore=skip)
    return dst


def _run(tree: Path, home: Path, args: list[str]) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "CAPTIONER_HOME": str(home), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "captioner", *args], env=env, capture_output=True, text=True,
                         cwd=str(tree))
    dt = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{tree}: captioner {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    return dt, out.stdout


def _imports(tree: Path, home: Path, args: list[str]) -> list[str]:
    """Which heavy libraries a warm caption call imports (``python -X importtime``)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "CAPTIONER_HOME": str(home), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    err = subprocess.run([sys.executable, "-X", "importtime", "-m", "captioner", *args], env=env,
                         capture_output=True, text=True, cwd=str(tree)).stderr
    tops = {line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")}
    return sorted(m for m in ("torch", "transformers", "onnxruntime", "tokenizers", "scipy", "sklearn") if m in tops)


def series(name: str, tree: Path, home: Path, args: list[str], reps: int) -> dict:
    load0 = os.getloadavg()
    cold, first = _run(tree, home, args)
    warm = [_run(tree, home, args)[0] for _ in range(reps)]
    helps = [_run(tree, home, ["--help"])[0] for _ in range(reps)]
    load1 = os.getloadavg()
    warm_sorted = sorted(warm)
    return {"code": name, "args": " ".join(args[2:-1]) or "(defaults)", "cold_s": round(cold, 3), "warm_s": [round(w, 3) for w in warm],
            "warm_median_s": round(warm_sorted[len(warm) // 2], 3), "warm_min_s": round(warm_sorted[0], 3),
            "help_median_s": round(sorted(helps)[len(helps) // 2], 3), "caption": first.splitlines()[0],
            "imports": _imports(tree, home, args), "load_before": [round(x, 2) for x in load0],
            "load_after": [round(x, 2) for x in load1]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--image", default="/usr/share/tuxpaint/stamps/symbols/money/us/coins/005nickel.png")
    ap.add_argument("--old-rev", default=None, help="the revision to compare with (default: before the latency work)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--new-args", default="|--captioner decoder",
                    help="'|'-separated caption options to time today's code with (default: its defaults, and "
                         "the decoder captioner, which is what the old code's defaults did)")
    ap.add_argument("--old-args", default="", help="'|'-separated caption options for the old code")
    ap.add_argument("--json", default=None, help="also write the JSON here")
    a = ap.parse_args(argv)
    src = Path(os.environ.get("CAPTIONER_HOME", Path.home() / ".cache" / "captioner"))
    if not any((src / "checkpoints").glob("decoder-*.pt")):
        raise SystemExit(f"{src} holds no trained decoder: run `captioner caption {a.image}` once first")
    rev = a.old_rev or default_old_rev()
    tmp = Path(tempfile.mkdtemp(prefix="cli-latency-"))
    old_tree = tmp / "old"
    _git("worktree", "add", "--detach", str(old_tree), rev)
    try:
        old_name = f"old ({_git('rev-parse', '--short', rev)})"
        new_name = f"new ({_git('rev-parse', '--short', 'HEAD')}{'+dirty' if _git('status', '--porcelain') else ''})"
        rows = []
        for name, tree, variants in ((old_name, old_tree, a.old_args), (new_name, ROOT, a.new_args)):
            for extra in variants.split("|"):
                home = _home_copy(src, tmp / f"home-{len(rows)}")
                rows.append(series(name, tree, home, ["caption", "-q", *extra.split(), a.image], a.reps))
    finally:
        _git("worktree", "remove", "--force", str(old_tree))
        shutil.rmtree(tmp, ignore_errors=True)
    res = {"bench": "cli_latency", "image": a.image, "reps": a.reps, "cores": os.cpu_count(), "rows": rows,
           "warm_speedup": round(rows[0]["warm_median_s"] / rows[len(a.old_args.split("|"))]["warm_median_s"], 2)}
    print(json.dumps(res, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    print("\n| code | options | cold s | warm median s (min) | --help median s | heavy imports (warm) | "
          "load before -> after |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['code']} | {r['args']} | {r['cold_s']:.2f} | {r['warm_median_s']:.2f} ({r['warm_min_s']:.2f}) | "
              f"{r['help_median_s']:.2f} | {', '.join(r['imports']) or '-'} | "
              f"{r['load_before'][0]:.2f} -> {r['load_after'][0]:.2f} |")
    same = [r["code"] + " " + r["args"] for r in rows[1:] if r["caption"] == rows[0]["caption"]]
    print(f"\nwarm speed-up (first old row / first new row): {res['warm_speedup']}x; the old first caption "
          f"also from: {', '.join(same) or 'none'}")


if __name__ == "__main__":
    main()
