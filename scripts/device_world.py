"""Device check of the JEPA world (at most 10 minutes on one H200): train the world's encoders at the
``gpu`` preset (twice the lab's scenes) for each seed through accelerate (``--device auto``), then print
the world's table (``python -m eval world report``) and the timings as JSON.

    python scripts/device_world.py [--seeds 0,1,2] [--budget-s 420] [--home DIR]
    python scripts/device_world.py --smoke      # CPU, the quick preset, one seed, two encoders (~2 min)

Seeds stop being trained once ``--budget-s`` seconds have gone (the report covers the seeds trained).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--budget-s", type=float, default=420.0, help="no new seed starts training after this")
    ap.add_argument("--home", default=None, help="CAPTIONER_HOME (default: a new temporary folder)")
    ap.add_argument("--smoke", action="store_true", help="CPU, quick preset, seed 0, text JEPA and untrained")
    a = ap.parse_args(argv)
    os.environ["CAPTIONER_HOME"] = a.home or tempfile.mkdtemp(prefix="world-device-")
    from captioner.world.train import train_world
    from eval.world.table import format_table, world_report

    preset, device = ("quick", "cpu") if a.smoke else ("gpu", "auto")
    seeds = [0] if a.smoke else [int(s) for s in a.seeds.split(",")]
    t0, timings, trained = time.time(), {}, []
    for s in seeds:
        if trained and time.time() - t0 > a.budget_s:
            break
        t = time.time()
        train_world(preset, s, device=device, progress=False)
        timings[f"train_seed_{s}_s"] = round(time.time() - t, 1)
        trained.append(s)
    t = time.time()
    kw = {"text_keys": ["text-jepa", "untrained"], "rotation_keys": ["paired", "pairfree-disjoint", "random"]} \
        if a.smoke else {}
    if a.smoke:
        from eval.world import chain

        chain.DECODER = {**chain.DECODER, "steps": 60}
        kw["jobs"] = 1          # the shorter decoder lives in this process, not in a report worker's
    res = world_report(preset, trained, device="cuda" if device == "auto" and _cuda() else "cpu", progress=False,
                       **kw)
    timings["report_s"] = round(time.time() - t, 1)
    timings["total_s"] = round(time.time() - t0, 1)
    print(format_table(res))
    summary = {"preset": preset, "seeds": trained, "timings": timings, "home": os.environ["CAPTIONER_HOME"],
               "targets": res["targets"]}
    print(json.dumps(summary, indent=2))
    return summary


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    main()
