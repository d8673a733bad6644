#!/usr/bin/env python
"""Device check: the pair-free matcher at N = 1,000,000 per side, d = 384, default bench noise (0.05), with
its candidate search on the GPU through torch; prints the bench's table row and the JSON row.

    timeout 600 python scripts/device_matcher.py                 # on a GPU machine (an H200: well under 10 min)
    python scripts/device_matcher.py --smoke                     # CPU, N = 3000 (tests)

The problem is ``eval.matcher_bench.make_problem_chunked`` (the bench's sizes above 60,000) and the row is
``eval.matcher_bench.bench_matchers`` with ``device="cuda"``: centring, PCA, sign search and the
one-to-one assignment run in numpy on the host as in the default path; the candidate search (the part that
grows fastest with N) runs exactly on the GPU instead of through the CPU's IVF. The JSON also goes to
``--out`` (or $OUT/device_matcher.json when $OUT is set).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--smoke", action="store_true", help="CPU, N = 3000: checks that the script works")
    ap.add_argument("--out", help="also write the JSON here")
    a = ap.parse_args(argv)
    import torch

    from eval.matcher_bench import bench_matchers, table

    if a.smoke:
        n, device = 3000, "cpu"
    elif torch.cuda.is_available():
        n, device = a.n, "cuda"
    else:
        sys.exit("device_matcher: no CUDA device; run with --smoke for the CPU check")
    t = time.perf_counter()
    row = bench_matchers(n, a.dim, noise=a.noise, gw=False, device=device)
    row["device"] = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    row["wall_s"] = round(time.perf_counter() - t, 2)
    res = {"machine": {"cpus": os.cpu_count(), "load_avg": [round(v, 2) for v in os.getloadavg()]},
           "matchers": [row]}
    print(table(res))
    print(json.dumps(row))
    out = a.out or (os.path.join(os.environ["OUT"], "device_matcher.json") if os.environ.get("OUT") else None)
    if out:
        Path(out).write_text(json.dumps(row, indent=2) + "\n")
    return row


if __name__ == "__main__":
    main()
