"""First-caption wall time and warm latency of `captioner caption`, the default path against the old one.

Each path runs in its own copy of a state folder, as fresh processes (what a user types):
- ``prebuilt``: a copy of ``--home`` (a home where `make eval` ran: embeddings, rotations, the caption bank);
  the first call, then a second one (warm).
- ``empty`` (``--empty``): an empty home; the first call (everything built on the spot), capped by ``--timeout``.

Paths: ``old`` = ``caption --rotation paired`` (paired retrieval over Tux Paint train + the decoder, which
trains on first use), ``new`` = ``caption`` (the classifier captioner over the default bank).

    python bench/cold_start.py [--home DIR] [--image PHOTO] [--empty] [--paths old,new] [--timeout 600] [--json]
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

PATHS = {"old": ["--rotation", "paired"], "new": []}


def run_once(home: Path, image: str, args: list, timeout: float) -> dict:
    env = dict(os.environ, CAPTIONER_HOME=str(home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "captioner", "caption", image, "-k", "1", "-q", *args],
                           env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"seconds": None, "timed_out_after": timeout, "caption": None}
    out = p.stdout.strip().splitlines()
    return {"seconds": round(time.perf_counter() - t0, 2), "rc": p.returncode,
            "caption": out[0].split(": ", 1)[-1] if out else p.stderr.strip()[-200:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", default=os.environ.get("CAPTIONER_HOME", str(Path.home() / ".cache/captioner")))
    ap.add_argument("--image", default=None, help="default: scikit-image's coffee photo")
    ap.add_argument("--empty", action="store_true", help="also time the first call on an empty home")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--paths", default="old,new", help="comma-separated: old, new")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    image = a.image
    if image is None:
        from captioner.datasets import get_dataset

        image = next(s.source for s in get_dataset("samples").samples if s.id == "coffee")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.paths.split(","):
            args = PATHS[name]
            home = Path(tmp) / f"prebuilt-{name}"
            shutil.copytree(a.home, home)
            first = run_once(home, image, args, a.timeout)
            warm = run_once(home, image, args, a.timeout)
            rows.append({"path": name, "home": "prebuilt", "first": first, "warm": warm})
            if a.empty:
                rows.append({"path": name, "home": "empty",
                             "first": run_once(Path(tmp) / f"empty-{name}", image, args, a.timeout)})
    res = {"image": image, "rows": rows, "loadavg": os.getloadavg(), "cpus": os.cpu_count()}
    if a.json:
        print(json.dumps(res, indent=1))
        return 0
    print("| path | home | first call s | warm call s | caption |\n|---|---|---|---|---|")
    for r in rows:
        f, w = r["first"], r.get("warm") or {}
        fs = f["seconds"] if f["seconds"] is not None else f"> {f['timed_out_after']:.0f} (timed out)"
        print(f"| {r['path']} | {r['home']} | {fs} | {w.get('seconds', '-')} | {f['caption'] or w.get('caption')} |")
    print(f"load average {res['loadavg']} on {res['cpus']} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
