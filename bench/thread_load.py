"""CPU work under thread settings, alone and beside a synthetic load: does it degrade in proportion to its
CPU share?

Three measurements, each in a fresh process (the OpenMP settings are read when torch loads):
``decoder`` (s/step of the "small" caption decoder's training step on a random corpus), ``torch-encoder``
(EfficientNet-Lite0 in torch eager, images/s) and ``onnx-encoder`` (the same through onnxruntime,
images/s), each over a fixed time window, with the process's CPU seconds per unit of work.
Settings (``$CAPTIONER_THREADS``): ``torch`` (the libraries' defaults: torch's 2 spinning OpenMP threads;
the behaviour before ``captioner/threads.py``), ``2`` and ``1`` (sleeping workers), ``auto``.
Phase ``quiet`` runs them as they come; phase ``loaded`` first starts ``--busy`` busy-looping processes
(each ends itself after ``--max-load-s`` seconds, and is stopped at the end of the phase). With a fair
scheduler, k busy processes on c cores leave a single-threaded job about c/(k+1) of the machine; a job
degrades in proportion when its loaded/quiet time ratio stays near that share's inverse and its CPU
seconds per unit stay flat.

    python bench/thread_load.py [--busy 6] [--window 5] [--settings torch,2,1,auto]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ("decoder", "torch-encoder", "onnx-encoder")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _timed(step, window: float, warmup: int = 2) -> dict:
    for _ in range(warmup):
        step()
    n, t0, c0 = 0, time.perf_counter(), _cpu()
    while time.perf_counter() - t0 < window:
        n += step()
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    return {"units": n, "wall_s": wall, "cpu_s": cpu}


def worker(kind: str, window: float) -> dict:
    from captioner.threads import configure

    s = configure()
    import numpy as np
    import torch

    out = {"threads": s.threads, "torch_threads": torch.get_num_threads(), "source": s.source}
    if kind == "decoder":
        import torch.nn.functional as F

        from captioner.decoder import build_model, preset

        mcfg, tcfg = preset("small")
        mcfg.vocab_size = 4000
        model = build_model(mcfg).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(0)

        def step():
            x = torch.nn.functional.normalize(torch.randn(tcfg.batch_size, mcfg.emb_dim, generator=g), dim=-1)
            tok = torch.randint(4, mcfg.vocab_size, (tcfg.batch_size, 16), generator=g)
            h = model(x, tok[:, :-1], hidden=True)
            loss = F.cross_entropy(model.head(h.reshape(-1, h.shape[-1])), tok[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            return 1
    else:
        from PIL import Image

        from captioner.encoders.offline import EfficientNetLite0

        enc = EfficientNetLite0(backend="torch" if kind == "torch-encoder" else "onnx")
        rng = np.random.default_rng(0)
        ims = [Image.fromarray(rng.integers(0, 255, (160, 160, 3), dtype=np.uint8)) for _ in range(8)]

        def step():
            enc.encode(ims)
            return len(ims)
    out.update(_timed(step, window))
    return out


def measure(kind: str, setting: str, window: float) -> dict:
    env = {**os.environ, "CAPTIONER_THREADS": setting, "PYTHONPATH": str(ROOT)}
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY"):
        env.pop(k, None)
    load = os.getloadavg()[0]
    try:
        p = subprocess.run([sys.executable, __file__, "--worker", kind, "--window", str(window)], env=env,
                           capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:  # a collapse: not even the warm-up and one window within 2 minutes
        return {"workload": kind, "setting": setting, "load_1m": round(load, 2), "threads": None,
                "torch_threads": "?", "units": 0, "rate": None, "unit": "timed out (120 s)", "cpu_s_per_unit": None}
    if p.returncode != 0:
        raise SystemExit(p.stderr[-2000:])
    r = json.loads(p.stdout.strip().splitlines()[-1])
    per = r["wall_s"] / r["units"]
    return {"workload": kind, "setting": setting, "load_1m": round(load, 2), "threads": r["threads"],
            "torch_threads": r["torch_threads"], "units": r["units"],
            "rate": round(r["units"] / r["wall_s"], 2) if kind != "decoder" else round(per, 4),
            "unit": "s/step" if kind == "decoder" else "images/s",
            "cpu_s_per_unit": round(r["cpu_s"] / r["units"], 4)}


def _busy(n: int, max_s: float) -> list:
    code = f"import time\nt = time.time() + {max_s}\nwhile time.time() < t:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", choices=WORKLOADS, help=argparse.SUPPRESS)
    ap.add_argument("--window", type=float, default=5.0, help="seconds of work per measurement")
    ap.add_argument("--busy", type=int, default=6, help="busy processes in the loaded phase")
    ap.add_argument("--max-load-s", type=float, default=120.0, help="the busy processes end themselves after this")
    ap.add_argument("--settings", default="torch,2,1,auto")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.worker, a.window)))
        return
    settings, kinds = a.settings.split(","), a.workloads.split(",")
    rows = []
    for phase in ("quiet", "loaded"):
        procs = _busy(a.busy, a.max_load_s) if phase == "loaded" else []
        t0 = time.time()
        try:
            for kind in kinds:
                for s in settings:
                    if phase == "loaded" and time.time() - t0 > a.max_load_s - 8 * a.window:
                        break  # the load ends by itself soon: a measurement takes ~5 windows under load
                    rows.append({"phase": phase, **measure(kind, s, a.window)})
                    if procs:  # a loaded figure counts only if the whole load was there to the end
                        rows[-1]["busy_alive"] = sum(p.poll() is None for p in procs)
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        finally:
            for p in procs:
                p.kill()
                p.wait()
    quiet = {(r["workload"], r["setting"]): r for r in rows if r["phase"] == "quiet"}
    for r in rows:
        q = quiet.get((r["workload"], r["setting"]))
        if r["phase"] == "loaded" and q and r["busy_alive"] == a.busy and r["rate"] and q["rate"]:
            slow = r["rate"] / q["rate"] if r["unit"] == "s/step" else q["rate"] / r["rate"]
            r["slowdown_vs_quiet"] = round(slow, 2)
            r["cpu_per_unit_vs_quiet"] = round(r["cpu_s_per_unit"] / q["cpu_s_per_unit"], 2)
    res = {"bench": "thread_load", "cores": os.cpu_count(), "busy": a.busy, "window_s": a.window, "rows": rows}
    print(json.dumps(res, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    print("\n| phase | workload | setting | threads | load 1m | rate | CPU s/unit | busy alive | slowdown vs quiet | "
          "CPU/unit vs quiet |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['phase']} | {r['workload']} | {r['setting']} | {r['torch_threads']} | {r['load_1m']:.2f} | "
              f"{r['rate']} {r['unit']} | {r['cpu_s_per_unit']} | {r.get('busy_alive', '')} | "
              f"{r.get('slowdown_vs_quiet', '')} | "
              f"{r.get('cpu_per_unit_vs_quiet', '')} |")


if __name__ == "__main__":
    main()
