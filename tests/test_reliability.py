"""Reliability: concurrent first use, damaged artifacts that heal, image bombs, demo hardening, resumes.

The subprocess tests start real processes on one key (fresh homes) and assert one result and no leftovers.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from captioner.cache import embed, load_embeddings
from captioner.datasets import CaptionDataset, Sample
from captioner.errors import BadImageError, CaptionerError, DamagedArtifactError
from captioner.images import load_image
from tests.fakes import FakeImageEncoder, FakeTextEncoder
from tests.reliability_fakes import png_bomb

ROOT = Path(__file__).resolve().parents[1]


def _dataset(folder: Path, n=6, bad=()):
    folder.mkdir(parents=True, exist_ok=True)
    samples = []
    for i in range(n):
        p = folder / f"im{i}.png"
        if i in bad:
            p.write_bytes(b"not a png")
        else:
            Image.new("RGB", (12, 12), (40 * i % 255, 10, 200)).save(p)
        samples.append(Sample(id=f"s{i}", source=str(p), captions=[f"caption {i}"]))
    return CaptionDataset("toy", "test", samples)


def _env(home: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "CAPTIONER_HOME": str(home), "OMP_NUM_THREADS": "1"}


def _run_together(script: str, n: int, home: Path, tmp: Path, timeout=120) -> list[subprocess.CompletedProcess]:
    """Start ``n`` processes of ``script``; each waits for a go-file so that they really start at once."""
    go = tmp / "go"
    body = (f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.01)\n"
            + textwrap.dedent(script))
    procs = [subprocess.Popen([sys.executable, "-c", body], env=_env(home), cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(n)]
    time.sleep(0.5)
    go.touch()
    out = []
    for p in procs:
        so, se = p.communicate(timeout=timeout)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, so, se))
    return out


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.name.startswith(".") or p.name.endswith(".tmp")
                  or ".tmp." in p.name or "damaged" in p.name)


# ----------------------------------------------------------------------------------------- concurrency
@pytest.mark.slow
def test_three_processes_on_one_cache_key_build_it_once(tmp_path):
    _dataset(tmp_path / "imgs", n=8)
    calls = tmp_path / "calls.txt"
    script = f"""
    import numpy as np, os, time
    from pathlib import Path
    from captioner.cache import embed
    from tests.fakes import FakeImageEncoder
    from captioner.datasets import CaptionDataset, Sample

    class Slow(FakeImageEncoder):
        def _encode(self, batch):
            with open({str(calls)!r}, "a") as f:
                f.write(f"{{os.getpid()}}\\n")
            time.sleep(0.3)
            return super()._encode(batch)

    folder = Path({str(tmp_path / "imgs")!r})  # made by the test: the workers only read it
    ds = CaptionDataset("toy", "test", [Sample(f"s{{i}}", str(folder / f"im{{i}}.png"), [f"caption {{i}}"])
                                        for i in range(8)])
    es = embed(Slow(), ds, batch_size=4, progress=False)
    print(es.X.shape[0], float(np.round(es.X.sum(), 5)))
    """
    res = _run_together(script, 3, tmp_path / "home", tmp_path)
    assert [r.returncode for r in res] == [0, 0, 0], [r.stderr[-800:] for r in res]
    assert len({r.stdout for r in res}) == 1 and res[0].stdout.split()[0] == "8"
    assert len(set(calls.read_text().split())) == 1  # one process encoded; the others loaded its cache
    emb = tmp_path / "home" / "embeddings"
    assert sorted(p.suffix for p in emb.iterdir()) == [".json", ".safetensors"]
    assert _leftovers(emb) == []
    assert sum("waiting for another process" in r.stderr for r in res) >= 1


@pytest.mark.slow
def test_samples_dataset_on_a_fresh_home_three_at_once(tmp_path):
    script = """
    from captioner.datasets import samples
    print(len(samples().samples))
    """
    res = _run_together(script, 3, tmp_path / "home", tmp_path)
    assert [r.returncode for r in res] == [0, 0, 0], [r.stderr[-800:] for r in res]
    n = int(res[0].stdout)
    assert n >= 5 and all(int(r.stdout) == n for r in res)
    folder = tmp_path / "home" / "sample-photos"
    assert _leftovers(folder) == [] and len(list(folder.glob("*.png"))) == n
    for p in folder.glob("*.png"):
        Image.open(p).load()  # each photo complete


@pytest.mark.slow
def test_key_lock_serialises_four_processes_and_leaves_no_lock_file(tmp_path):
    counter = tmp_path / "artifact.txt"
    counter.write_text("0")
    script = f"""
    import time
    from pathlib import Path
    from captioner.artifacts import key_lock
    p = Path({str(counter)!r})
    with key_lock(p):
        n = int(p.read_text())
        time.sleep(0.1)   # a read-modify-write that loses updates without the lock
        p.write_text(str(n + 1))
    """
    res = _run_together(script, 4, tmp_path / "home", tmp_path)
    assert [r.returncode for r in res] == [0] * 4, [r.stderr[-800:] for r in res]
    assert counter.read_text() == "4"
    assert not list(tmp_path.glob(".*.lock"))


def test_key_lock_between_threads(tmp_path):
    from captioner.artifacts import key_lock

    box = {"n": 0, "inside": 0, "max": 0}

    def work():
        with key_lock(tmp_path / "x.bin"):
            box["inside"] += 1
            box["max"] = max(box["max"], box["inside"])
            n = box["n"]
            time.sleep(0.02)
            box["n"] = n + 1
            box["inside"] -= 1

    ts = [threading.Thread(target=work) for _ in range(5)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert box == {"n": 5, "inside": 0, "max": 1}
    assert not list(tmp_path.glob(".*"))


# ------------------------------------------------------------------------------------ damaged caches heal
@pytest.mark.parametrize("damage", ["truncated", "zero-byte", "garbage-json", "edited-encoder"])
def test_damaged_cache_is_moved_aside_and_rebuilt(tmp_path, damage, caplog):
    ds = _dataset(tmp_path / "imgs")
    enc = FakeImageEncoder()
    first = embed(enc, ds, progress=False, out=tmp_path / "c" / "x.safetensors")
    path, side = first.path, first.path.with_suffix(".json")
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:50])
    elif damage == "zero-byte":
        path.write_bytes(b"")
    elif damage == "garbage-json":
        side.write_text("{not json")
    else:
        meta = json.loads(side.read_text())
        meta["encoder"]["name"] = "someone-else"
        side.write_text(json.dumps(meta))
    if damage != "edited-encoder":
        with pytest.raises(DamagedArtifactError, match=str(path.parent)):
            load_embeddings(path)  # a direct load names the file in one line
    calls = enc.calls
    with caplog.at_level(logging.WARNING, logger="captioner"):
        again = embed(enc, ds, progress=False, out=path)
    assert enc.calls > calls  # rebuilt
    np.testing.assert_array_equal(again.X, first.X)
    assert json.loads(side.read_text())["encoder"]["name"] == "fake-image"
    moved = sorted(p.name for p in path.parent.glob("*.damaged-*"))
    assert len(moved) == 2 and moved[0].startswith("x.json.damaged-") and moved[1].startswith("x.safetensors.")
    msg = [r.getMessage() for r in caplog.records if "moved aside" in r.getMessage()]
    assert len(msg) == 1 and str(path) in msg[0] and "\n" not in msg[0]


def test_repaired_images_invalidate_partial_chunks(tmp_path):
    folder = tmp_path / "imgs"
    ds = _dataset(folder, n=4, bad={0, 1, 2, 3})
    out = tmp_path / "c" / "x.safetensors"
    with pytest.raises(CaptionerError, match="every image failed"):
        embed(FakeImageEncoder(), ds, progress=False, out=out)
    assert len(list(out.parent.glob(".*.partial"))) == 1  # kept: a resume after a crash reuses it
    time.sleep(0.01)
    _dataset(folder, n=4)  # the user repairs the files in place
    es = embed(FakeImageEncoder(), ds, progress=False, out=out)
    assert es.X.shape == (4, 15) and es.meta["n_skipped"] == 0
    assert _leftovers(out.parent) == []  # the stale chunks of the broken files went too


def test_damaged_rotation_is_moved_aside(tmp_path, caplog):
    from alignment.procrustes import fit_procrustes
    from captioner.pipeline_rotations import load_or_heal

    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 6))
    m = fit_procrustes(X, X @ np.linalg.qr(rng.standard_normal((6, 6)))[0])
    path = tmp_path / "paired.safetensors"
    for damage in ("hash-removed", "bad-json", "bad-arrays"):
        m.save(path)
        side = path.with_suffix(".json")
        assert load_or_heal(path, None, None) is not None
        if damage == "hash-removed":
            meta = json.loads(side.read_text())
            del meta["arrays_sha256"]
            side.write_text(json.dumps(meta))
        elif damage == "bad-json":
            side.write_text('{"method": ')
        else:
            path.write_bytes(b"\x00" * 64)
        with caplog.at_level(logging.WARNING, logger="captioner"):
            assert load_or_heal(path, None, None) is None
        assert not path.exists() and not side.exists()
    assert len(list(tmp_path.glob("paired.safetensors.damaged-*"))) >= 1
    assert sum("moved aside" in r.getMessage() for r in caplog.records) == 3


@pytest.mark.slow
def test_damaged_decoder_checkpoint_is_retrained(tmp_path, caplog):
    from captioner.decoder import preset
    from captioner.decoder_train import train_decoder

    texts = ["a koala.", "a red fire truck.", "a cup of coffee."]
    E = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    fp = {"name": "fake-text", "dim": 8, "pooling": "hash", "weights_hash": "w"}
    path = tmp_path / "dec.pt"
    path.write_bytes(b"PK\x03\x04 half a zip")
    m, t = preset("tiny", steps=4, save_every=2)
    with caplog.at_level(logging.WARNING, logger="captioner"):
        dec = train_decoder(texts, E, fp, path, m, t, progress=False)
    assert dec.meta["step"] == 4 and path.exists()
    assert len(list(tmp_path.glob("dec.pt.damaged-*"))) == 1
    assert any("dec.pt" in r.getMessage() and "moved aside" in r.getMessage() for r in caplog.records)


def test_sidecar_encoder_edit_is_caught_even_with_the_right_key(tmp_path):
    ds = _dataset(tmp_path / "imgs")
    es = embed(FakeTextEncoder(8), ds, progress=False, out=tmp_path / "t.safetensors")
    side = es.path.with_suffix(".json")
    meta = json.loads(side.read_text())
    meta["encoder"]["weights_hash"] = "tampered"
    side.write_text(json.dumps(meta))
    again = embed(FakeTextEncoder(8), ds, progress=False, out=es.path)
    assert again.meta["encoder"]["weights_hash"] == "fake8"
    assert len(list(tmp_path.glob("t.json.damaged-*"))) == 1


# ------------------------------------------------------------------------------------------------ images
def test_fifo_and_symlink_loop_are_one_line_skips(tmp_path):
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    with pytest.raises(BadImageError, match="not a regular file"):
        load_image(fifo)  # returns at once: a FIFO is never opened
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(BadImageError, match="symbolic link loop"):
        load_image(a)
    with pytest.raises(BadImageError, match="file not found"):
        load_image(tmp_path / "none.png")


def test_memory_budget_refuses_from_the_header(tmp_path):
    from captioner.images import MAX_DECODE_BYTES

    p = png_bomb(tmp_path / "wide.png", 12000, 12000)  # 549 MiB as RGBA: above the 512 MiB budget
    assert 12000 * 12000 * 4 > MAX_DECODE_BYTES
    with pytest.raises(BadImageError, match="MiB limit"):
        load_image(p)
    ok = png_bomb(tmp_path / "ok.png", 3000, 2000)
    assert load_image(ok).size == (3000, 2000)


@pytest.mark.slow
def test_20000_square_rgba_png_bomb_stays_under_300_mb(tmp_path):
    bomb = png_bomb(tmp_path / "bomb.png")
    assert bomb.stat().st_size < 2_000_000
    code = textwrap.dedent(f"""
    from captioner.images import load_image
    from captioner.errors import BadImageError
    try:
        load_image({str(bomb)!r})
        print("decoded")
    except BadImageError as e:
        print("refused:", e)
    # VmHWM: this process's own peak (ru_maxrss would carry the parent's peak across fork + exec)
    print([int(x.split()[1]) // 1024 for x in open("/proc/self/status") if x.startswith("VmHWM")][0])
    """)
    r = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path / "home"), capture_output=True, text=True,
                       timeout=120)
    out = r.stdout.splitlines()
    assert out[0].startswith("refused:") and "20000x20000" in out[0], r.stderr
    assert int(out[1]) < 300  # MB peak RSS; a full decode would take 1,600 MB


# -------------------------------------------------------------------------------------------------- demo
def test_demo_accepts_only_the_encoders_it_lists(tmp_path):
    from captioner.demo import DemoHandlers
    from tests.demo_fakes import FakePipeline

    built = []
    h = DemoHandlers(FakePipeline(), factory=lambda i, t: built.append((i, t)) or FakePipeline(i, t))
    im = Image.new("RGB", (16, 16), (200, 0, 0))
    for bad in ("jepa:/etc/passwd", "jepa:/nonexistent/x", "hf-image:../../..", "../../etc", "x" * 500):
        status = h.caption(im, image_encoder=bad)[-1]
        assert status.startswith("unknown encoder") and "internal error" not in status and len(status) < 200
    assert h.classify(im, "a, b", text_encoder="hf-text:/etc")[-1].startswith("unknown encoder")
    assert built == []


def test_demo_pipeline_and_report_caches_are_bounded():
    from captioner import demo
    from tests.demo_fakes import FakePipeline

    h = demo.DemoHandlers(FakePipeline(), factory=lambda i, t: FakePipeline(i, t))
    names = [f"img-{k}" for k in range(6)]
    h.image_choices += names
    for n in names:
        h.pipeline(n, None)
        h.alignment(n, None, n_perm=5)
    assert len(h._pipelines) == demo.MAX_PIPELINES + 1 and h.default_pair in h._pipelines
    assert set(h._locks) == set(h._pipelines)
    assert (names[-1], h.default_pair[1]) in h._pipelines and (names[0], h.default_pair[1]) not in h._pipelines
    for k in range(demo.MAX_REPORTS + 5):
        h._reports[("x", "y", k)] = {}
    assert len(h._reports) == demo.MAX_REPORTS


def test_pipeline_head_cache_is_an_lru():
    from captioner.lru import LRU
    from captioner.pipeline import MAX_HEADS, Pipeline

    p = Pipeline(progress=False)
    assert isinstance(p.zeroshot.heads, LRU) and p.zeroshot.heads.maxsize == MAX_HEADS
    c = LRU(2, pinned=["keep"])
    c["keep"], c["a"], c["b"] = 0, 1, 2
    _ = c["a"]
    c["c"] = 3
    assert list(c) == ["keep", "a", "c"]


def test_demo_decodes_at_most_two_images_at_once(monkeypatch):
    from captioner import demo, images

    box = {"in": 0, "max": 0}
    lock = threading.Lock()

    def slow_load(src, *a, **k):
        with lock:
            box["in"] += 1
            box["max"] = max(box["max"], box["in"])
        time.sleep(0.05)
        with lock:
            box["in"] -= 1
        return Image.new("RGB", (4, 4))

    monkeypatch.setattr(images, "load_image", slow_load)
    ts = [threading.Thread(target=demo.decode_image, args=(Image.new("RGB", (4, 4)),)) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert box["max"] == demo.DECODE_CONCURRENCY == 2


# ----------------------------------------------------------------------------------------------- training
def test_log_seconds_continue_after_resume_and_empty_resume_says_step_0(tmp_path, caplog):
    from captioner.jepa.train import read_log, train
    from tests.test_jepa_train import _data, _text_cfg

    cfg = _text_cfg(steps=8, save_every=4)
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="captioner"), pytest.raises(_Stop):
        train(cfg, out, resume=True, data=_data(), progress=False, callback=_stop_at(4))
    assert any("no checkpoint to resume" in r.getMessage() and "step 0" in r.getMessage() for r in caplog.records)
    before = [float(r["seconds"]) for r in read_log(out)]
    train(cfg, out, resume=True, data=_data(), progress=False)
    rows = read_log(out)
    secs = [float(r["seconds"]) for r in rows]
    assert [int(r["step"]) for r in rows] == list(range(1, 9))
    assert secs[:4] == before[:4] and secs[4] >= secs[3]  # the clock runs on from step 4's time
    assert all(b >= a for a, b in zip(secs, secs[1:]))


class _Stop(Exception):
    pass


def _stop_at(n):
    def cb(step, loss):
        if step == n:
            raise _Stop()
    return cb
