"""The reliability probe: concurrent first use, image bombs, damaged artifacts, mutated datasets and a loaded
demo, each case in its own process where memory matters. Prints JSON, then one table (case, outcome, peak
memory). A benchmark, not a test: outcomes are counted, nothing is timed against a threshold.

    python bench/reliability_probe.py [--json-only] [--skip-demo]

Runs on fake encoders and the fake demo pipeline (no model weights), in a temporary $CAPTIONER_HOME.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PEAK = 'print("PEAK", [int(x.split()[1]) // 1024 for x in open("/proc/self/status") if x.startswith("VmHWM")][0])'


def peak_mb() -> int:
    """This process's peak resident memory (VmHWM), MB."""
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) // 1024 for x in f if x.startswith("VmHWM"))


def child(code: str, home: Path, n: int = 1, timeout: float = 180) -> list[dict]:
    """Run ``code`` in ``n`` processes started together; each: rc, stdout (without the PEAK line), peak MB."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CAPTIONER_HOME": str(home), "OMP_NUM_THREADS": "1"}
    go = home.parent / f"go-{time.monotonic_ns()}"
    body = (f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.01)\n"
            + textwrap.dedent(code) + "\n" + PEAK + "\n")
    procs = [subprocess.Popen([sys.executable, "-c", body], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(n)]
    time.sleep(0.3)
    go.touch()
    out = []
    for p in procs:
        try:
            so, se = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
        lines = so.splitlines()
        peak = next((int(x.split()[1]) for x in lines if x.startswith("PEAK ")), None)
        out.append({"rc": p.returncode, "out": "\n".join(x for x in lines if not x.startswith("PEAK ")),
                    "err": se.strip().splitlines()[-1:] if se.strip() else [], "peak_mb": peak,
                    "traceback": "Traceback" in se})
    return out


def _toy_images(folder: Path, n: int = 8) -> None:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.new("RGB", (12, 12), (30 * i % 255, 10, 200)).save(folder / f"im{i}.png")


def case_concurrency(tmp: Path) -> list[dict]:
    _toy_images(tmp / "imgs")
    calls = tmp / "calls.txt"
    code = f"""
    import numpy as np
    from pathlib import Path
    from captioner.cache import embed
    from captioner.datasets import CaptionDataset, Sample
    from tests.fakes import FakeImageEncoder

    class Slow(FakeImageEncoder):
        def _encode(self, batch):
            open({str(calls)!r}, "a").write(f"{{os.getpid()}}\\n")
            time.sleep(0.3)
            return super()._encode(batch)

    f = Path({str(tmp / "imgs")!r})
    ds = CaptionDataset("toy", "test", [Sample(f"s{{i}}", str(f / f"im{{i}}.png"), ["c"]) for i in range(8)])
    print(round(float(embed(Slow(), ds, batch_size=4, progress=False).X.sum()), 5))
    """
    rows = []
    home = tmp / "home-embed"
    res = child(code, home, n=3)
    left = [p.name for p in (home / "embeddings").rglob("*") if p.name.startswith(".") or "damaged" in p.name]
    builders = len(set(calls.read_text().split())) if calls.exists() else 0
    rows.append({"case": "3 processes embed one key", "ok": sum(r["rc"] == 0 for r in res) == 3
                 and len({r["out"] for r in res}) == 1 and builders == 1 and not left,
                 "outcome": f"{sum(r['rc'] == 0 for r in res)}/3 ok, same result: {len({r['out'] for r in res}) == 1}, "
                            f"processes that encoded: {builders}, leftovers: {len(left)}",
                 "peak_mb": max(r["peak_mb"] or 0 for r in res)})
    home = tmp / "home-samples"
    res = child("from captioner.datasets import samples\nprint(len(samples().samples))", home, n=3)
    left = [p.name for p in (home / "sample-photos").iterdir() if not p.name.endswith(".png")] \
        if (home / "sample-photos").exists() else ["no folder"]
    rows.append({"case": "3 processes: samples on a fresh home", "ok": all(r["rc"] == 0 for r in res) and not left,
                 "outcome": f"{sum(r['rc'] == 0 for r in res)}/3 ok ({res[0]['out']} photos), leftovers: {len(left)}",
                 "peak_mb": max(r["peak_mb"] or 0 for r in res)})
    return rows


def case_bombs(tmp: Path) -> list[dict]:
    from tests.reliability_fakes import png_bomb

    bomb = png_bomb(tmp / "bomb.png")
    rows = []
    for name, code in (
            ("20000x20000 RGBA PNG (1.5 MB): CLI decode", f"""
            from captioner.images import load_image
            from captioner.errors import BadImageError
            try:
                load_image({str(bomb)!r}); print("decoded")
            except BadImageError as e:
                print("refused:", e.reason[:70])
            """),
            ("20000x20000 RGBA PNG x4 at once: demo decode", f"""
            from concurrent.futures import ThreadPoolExecutor
            from captioner.demo import DemoHandlers
            from tests.demo_fakes import FakePipeline
            h = DemoHandlers(FakePipeline())
            with ThreadPoolExecutor(4) as ex:
                st = list(ex.map(lambda _: h.caption({str(bomb)!r})[-1], range(4)))
            print(len([s for s in st if "MiB limit" in s]), "of 4 refused:", st[0][:60])
            """)):
        r = child(code, tmp / "home-bomb")[0]
        rows.append({"case": name, "ok": r["rc"] == 0 and "decoded" not in r["out"], "outcome": r["out"] or r["err"],
                     "peak_mb": r["peak_mb"]})
    code = f"""
    import os
    from captioner.images import load_image
    from captioner.errors import BadImageError
    d = {str(tmp)!r}
    os.mkfifo(d + "/fifo.png"); os.symlink(d + "/loop.png", d + "/loop.png")
    for p in (d + "/fifo.png", d + "/loop.png"):
        try:
            load_image(p)
        except BadImageError as e:
            print(os.path.basename(p), "->", e.reason[:40])
    """
    r = child(code, tmp / "home-bomb")[0]
    rows.append({"case": "FIFO and symlink loop as images", "ok": r["rc"] == 0 and r["out"].count("->") == 2,
                 "outcome": r["out"].replace("\n", "; "), "peak_mb": r["peak_mb"]})
    return rows


def case_damaged(tmp: Path) -> list[dict]:
    _toy_images(tmp / "imgs2", 4)
    code = f"""
    import json, logging
    from pathlib import Path
    from captioner.cache import embed
    from captioner.datasets import CaptionDataset, Sample
    from tests.fakes import FakeImageEncoder
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    f = Path({str(tmp / "imgs2")!r})
    ds = CaptionDataset("toy", "test", [Sample(f"s{{i}}", str(f / f"im{{i}}.png"), ["c"]) for i in range(4)])
    out = f / "c.safetensors"
    ref = embed(FakeImageEncoder(), ds, progress=False, out=out).X
    healed = []
    for kind in ("truncated", "zero-byte", "garbage-json", "edited-encoder"):
        side = out.with_suffix(".json")
        if kind == "truncated": out.write_bytes(out.read_bytes()[:40])
        if kind == "zero-byte": out.write_bytes(b"")
        if kind == "garbage-json": side.write_text("{{oops")
        if kind == "edited-encoder":
            m = json.loads(side.read_text()); m["encoder"]["name"] = "x"; side.write_text(json.dumps(m))
        healed.append((embed(FakeImageEncoder(), ds, progress=False, out=out).X == ref).all())
    print(f"{{sum(healed)}}/4 rebuilt equal,", len(list(f.glob("*.damaged-*"))), "damaged files kept aside")
    """
    r = child(code, tmp / "home-damaged")[0]
    rows = [{"case": "damaged cache x4 (truncated, 0 B, bad JSON, edited)", "ok": r["rc"] == 0
             and r["out"].startswith("4/4"), "outcome": r["out"] or r["err"], "peak_mb": r["peak_mb"]}]
    code = f"""
    import json, numpy as np
    from pathlib import Path
    from alignment.procrustes import fit_procrustes
    from captioner.pipeline_rotations import load_or_heal
    X = np.random.default_rng(0).standard_normal((30, 5))
    p = Path({str(tmp / "rot.safetensors")!r}); side = p.with_suffix(".json")
    fit_procrustes(X, X).save(p); m = json.loads(side.read_text()); del m["arrays_sha256"]
    side.write_text(json.dumps(m)); a = load_or_heal(p, None, None)
    fit_procrustes(X, X).save(p); side.write_text("{{"); b = load_or_heal(p, None, None)
    print("hash removed ->", "refit" if a is None else "loaded", "; bad JSON ->", "refit" if b is None else "loaded")
    """
    r = child(code, tmp / "home-damaged")[0]
    rows.append({"case": "damaged rotation (hash removed, bad JSON)", "ok": r["rc"] == 0 and r["out"].count("refit") == 2,
                 "outcome": r["out"] or r["err"], "peak_mb": r["peak_mb"]})
    return rows


def case_datasets(tmp: Path) -> list[dict]:
    code = f"""
    import json, random
    from pathlib import Path
    from PIL import Image
    from captioner.datasets import coco_karpathy, coco_official
    from captioner.errors import CaptionerError
    from tests.reliability_fakes import mutate
    from tests.test_dataset_fuzz import KARPATHY, OFFICIAL
    root = Path({str(tmp / "coco")!r}); (root / "val2014").mkdir(parents=True); (root / "annotations").mkdir()
    for n in ("a.jpg", "b.jpg"):
        Image.new("RGB", (8, 8)).save(root / "val2014" / n)
    rng = random.Random(1); counts = {{"loaded": 0, "one-line error": 0, "traceback": 0}}
    for k in range(600):
        base, path, fn = (KARPATHY, root / "dataset_coco.json", lambda: coco_karpathy(root, "all")) if k % 2 \\
            else (OFFICIAL, root / "annotations" / "captions_val2014.json", lambda: coco_official(root))
        d = base
        for _ in range(rng.randint(1, 3)):
            d = mutate(d, rng)
        path.write_text(json.dumps(d))
        try:
            fn(); counts["loaded"] += 1
        except CaptionerError:
            counts["one-line error"] += 1
        except Exception:
            counts["traceback"] += 1
    print(json.dumps(counts))
    """
    r = child(code, tmp / "home-ds")[0]
    counts = json.loads(r["out"]) if r["rc"] == 0 else {}
    return [{"case": "600 mutated COCO / coco-official files", "ok": counts.get("traceback", 1) == 0,
             "outcome": ", ".join(f"{k} {v}" for k, v in counts.items()) or r["err"], "peak_mb": r["peak_mb"]}]


def case_demo(tmp: Path) -> list[dict]:
    """300 requests 16 at a time, then 400 at 100: the fake pipeline behind the real server on 127.0.0.1."""
    import socket
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    from PIL import Image

    from captioner.demo import build_app, launch
    from tests.demo_fakes import FakePipeline

    os.environ["CAPTIONER_HOME"] = str(tmp / "home-demo")
    img = tmp / "red.png"
    Image.new("RGB", (48, 48), (255, 0, 0)).save(img)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = build_app(FakePipeline(), examples=[])
    launch(app, host="127.0.0.1", port=port, block=False, quiet=True)
    api = app.local_url + "gradio_api"

    def one(http):
        try:
            with open(img, "rb") as f:
                up = http.post(f"{api}/upload", files={"files": ("red.png", f, "image/png")})
            if up.status_code != 200:
                return str(up.status_code)
            image = {"path": up.json()[0], "orig_name": "red.png", "meta": {"_type": "gradio.FileData"}}
            r = http.post(f"{api}/call/caption", json={"data": [image, "paired", "fake-image", "fake-text", 5, True, "rotation"]})
            if r.status_code != 200:
                return str(r.status_code)
            text = http.get(f"{api}/call/caption/{r.json()['event_id']}").text
            if "event: complete" in text:
                return "ok"
            return "queue full" if "queue" in text.lower() and "full" in text.lower() else "error event"
        except httpx.HTTPError as e:
            return type(e).__name__

    rows = []
    try:
        for n, conc in ((300, 16), (400, 100)):
            t0 = time.perf_counter()
            with httpx.Client(timeout=60, limits=httpx.Limits(max_connections=conc)) as http, \
                    ThreadPoolExecutor(conc) as ex:
                res = list(ex.map(lambda _: one(http), range(n)))
            counts = {k: res.count(k) for k in sorted(set(res))}
            bad = {k: v for k, v in counts.items() if k not in ("ok", "503", "queue full")}
            rows.append({"case": f"demo: {n} captions, {conc} at a time", "ok": not bad and counts.get("ok", 0) > 0,
                         "outcome": ", ".join(f"{k} {v}" for k, v in counts.items())
                         + f" in {time.perf_counter() - t0:.1f} s", "peak_mb": peak_mb()})
    finally:
        app.close()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json-only", action="store_true")
    ap.add_argument("--skip-demo", action="store_true")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="reliability-") as d:
        tmp = Path(d)
        for fn in (case_concurrency, case_bombs, case_damaged, case_datasets) + (() if a.skip_demo else (case_demo,)):
            rows += fn(tmp)
    res = {"cases": rows, "all_ok": all(r["ok"] for r in rows), "seconds": round(time.perf_counter() - t0, 1),
           "loadavg": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}
    print(json.dumps(res, indent=2))
    if not a.json_only:
        print("\n| case | outcome | peak memory |\n| --- | --- | --- |")
        for r in rows:
            print(f"| {r['case']} | {'ok' if r['ok'] else 'FAIL'}: {r['outcome']} | {r['peak_mb']} MB |")
        print(f"\nload average {res['loadavg']} on {res['cpus']} CPUs, {res['seconds']} s")
    return 0 if res["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
