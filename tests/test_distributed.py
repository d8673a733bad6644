"""Several processes on CPU (gloo), launched the way docs/scaling-out.md says: ``accelerate launch
--multi_gpu --num_processes 2`` (on a machine without GPUs its processes run on CPU), or one command per
process with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set by hand (what a several-machine launch
amounts to, and the way to give each process different arguments or kill one).

Known answers: the cache written by two processes is byte-for-byte the one process's; two processes
train on the same global batches as one, so their logged losses agree with one process's to float
summation order (``REL_TOL``); checkpoints move between one and two processes; disagreeing processes all
stop with the same line; a killed process leaves no cache and no half checkpoint, and a rerun resumes. The
same for ``captioner world train`` (its three models in turn, through ``captioner train``'s loop).
"""
from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

ROOT = Path(__file__).resolve().parents[1]
WORKER = str(ROOT / "tests" / "dist_worker.py")
# One process vs two on the same global batch: the same sums in another order (per-process means, then
# their mean; all-reduced BatchNorm sums and gradients). Measured after 2 + 2 + 2 steps (tiny preset, batch
# 16): the logged losses (6 significant digits) equal; the weights differ by ||dw|| / ||w|| = 2.5e-5 (text
# JEPA) and 7.2e-5 (image JEPA), Adam amplifying float noise in near-zero gradients. The world (smoke preset,
# 3 models x 4 steps, batch 16, across 2 / 1 / 2 processes): losses equal; weights 1.4e-4 (image JEPA),
# 1.2e-4 (text JEPA), 3e-8 (next-token LM).
REL_TOL = 1e-5      # logged losses
WEIGHT_TOL = 5e-4   # final weights


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(home: Path, **extra) -> dict:
    env = dict(os.environ)
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               CAPTIONER_HOME=str(home), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def launch(args: list, home: Path, n: int = 2) -> subprocess.CompletedProcess:
    """The documented command: ``accelerate launch --multi_gpu --num_processes N -m captioner ...``."""
    port = _free_port()
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(n),
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(port), "-m", "captioner", *args]
    res = subprocess.run(cmd, env=_env(home, MASTER_PORT=port), capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def by_hand(per_rank_args: list[list], home: Path, **extra) -> list[tuple[int, str]]:
    """One process per argument list, joined by hand (RANK, WORLD_SIZE, MASTER_*): (exit code, stderr)."""
    port, n = _free_port(), len(per_rank_args)
    procs = [subprocess.Popen([sys.executable, WORKER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=_env(home, RANK=r, LOCAL_RANK=r, WORLD_SIZE=n, LOCAL_WORLD_SIZE=n,
                                                  MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **extra))
             for r, args in enumerate(per_rank_args)]
    out = []
    for p in procs:
        _, err = p.communicate(timeout=240)
        out.append((p.returncode, err))
    return out


def _error_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("error:")]


def _log(out: Path) -> dict:
    with open(out / "log.csv", newline="") as f:
        return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(f)}


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def _weight_drift(a: Path, b: Path) -> float:
    """||w_a - w_b|| / ||w_a|| over all the weights of two runs (one norm: Adam turns float noise in a
    near-zero gradient into a full-size step, so a single near-zero bias can differ relatively much)."""
    import torch

    wa, wb = (torch.load(p / "checkpoint.pt", weights_only=True)["model"] for p in (a, b))
    assert wa.keys() == wb.keys()
    keys = [k for k in wa if wa[k].is_floating_point()]
    num = sum(float(((wa[k].double() - wb[k].double()) ** 2).sum()) for k in keys)
    return (num / sum(float((wa[k].double() ** 2).sum()) for k in keys)) ** 0.5


# -------------------------------------------------------------------------------------------- embed
@pytest.fixture(scope="module")
def image_encoder(tmp_path_factory):
    """A one-step tiny image JEPA (an encoder that needs no download) and a 600-image folder dataset
    (3 chunks of the cache: 256 + 256 + 88 rows)."""
    from PIL import Image

    from captioner.jepa.train import resolve_config, train

    base = tmp_path_factory.mktemp("dist-embed")
    cfg = resolve_config("image-jepa", "tiny", corpus="scenelab", n_scenes=16, steps=1, batch_size=8)
    train(cfg, base / "jepa", progress=False)
    rng = np.random.default_rng(0)
    for i in range(600):
        d = base / "photos" / f"class{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(d / f"{i:04d}.png")
    return base


def _embed_args(base: Path, out: Path, split: str = "all") -> list:
    return ["embed", "-e", f"jepa:{base / 'jepa'}", "-d", "folder", "--root", str(base / "photos"), "-s", split,
            "--out", str(out), "--json"]


def _reference(base: Path, out: Path, counter: list | None = None):
    """The one-process cache, written in this process (one torch thread, as in the launched ones)."""
    from captioner.cache import embed
    from captioner.datasets import get_dataset
    from captioner.encoders import get_encoder

    enc = get_encoder(f"jepa:{base / 'jepa'}")
    if counter is not None:
        real = enc.encode
        enc.encode = lambda xs: (counter.append(len(xs)), real(xs))[1]
    return embed(enc, get_dataset("folder", "all", root=base / "photos"), out=out, progress=False)


def test_embed_two_processes_write_the_one_process_cache(image_encoder, tmp_path):
    ref = _reference(image_encoder, tmp_path / "one.safetensors")
    res = launch(_embed_args(image_encoder, tmp_path / "two.safetensors"), tmp_path / "home")
    summaries = [json.loads(ln) for ln in res.stdout.splitlines() if ln.startswith("{")]
    assert len(summaries) == 2 and {s["N"] for s in summaries} == {600}        # both processes report it
    assert (tmp_path / "two.safetensors").read_bytes() == (tmp_path / "one.safetensors").read_bytes()
    one, two = json.loads(ref.path.with_suffix(".json").read_text()), json.loads((tmp_path / "two.json").read_text())
    assert {k for k in one if one[k] != two[k]} == {"created", "seconds"}
    assert not list(tmp_path.glob(".*partial"))                                 # shards cleaned up


def test_embed_on_two_machines_with_the_example_config_file(image_encoder, tmp_path):
    """docs/accelerate/multi_node.yaml as docs/scaling-out.md runs it: one launcher per machine (here two on
    this one, 1 process each, machine 0 at 127.0.0.1), same cache as one process."""
    _reference(image_encoder, tmp_path / "one.safetensors")
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                               str(ROOT / "docs" / "accelerate" / "multi_node.yaml"), "--machine_rank", str(r),
                               "--num_processes", "2", "--main_process_ip", "127.0.0.1", "--main_process_port",
                               str(port), "-m", "captioner", *_embed_args(image_encoder, tmp_path / "two.safetensors")],
                              env=_env(tmp_path / "home"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0 and json.loads(out)["N"] == 600, err[-3000:]
    assert (tmp_path / "two.safetensors").read_bytes() == (tmp_path / "one.safetensors").read_bytes()


def test_embed_processes_that_disagree_all_stop_with_one_line(image_encoder, tmp_path):
    out = tmp_path / "c.safetensors"
    res = by_hand([_embed_args(image_encoder, out, "all"), _embed_args(image_encoder, out, "train")],
                  tmp_path / "home")
    lines = [_error_lines(err) for _, err in res]
    assert [code for code, _ in res] == [2, 2], res
    assert lines[0] == lines[1] and len(lines[0]) == 1, res
    assert lines[0][0].startswith("error: the 2 processes of this launch disagree on the embedding cache to "
                                  "write: dataset is 'folder/all' on process 0 but 'folder/train' on process 1")
    assert "Traceback" not in res[0][1] + res[1][1]
    assert not out.exists() and not list(tmp_path.glob(".*partial"))           # nothing started


def test_embed_process_killed_leaves_no_cache_and_a_rerun_resumes(image_encoder, tmp_path):
    out = tmp_path / "c.safetensors"
    res = by_hand([_embed_args(image_encoder, out)] * 2, tmp_path / "home", DIE_RANK=1, DIE_AT="encode")
    (code0, err0), (code1, err1) = res
    assert code1 == 9 and code0 == 2, res
    line = _error_lines(err0)
    assert len(line) == 1 and line[0].startswith("error: process 0 of 2: lost contact with another process of "
                                                 "this launch during the embedding cache's barrier"), err0
    assert "Traceback" not in err0 and "rerun the same command to resume" in line[0]
    assert not out.exists() and not out.with_suffix(".json").exists()           # no half-written cache
    shards = sorted(p.name for p in next(tmp_path.glob(".c.*.partial")).iterdir())
    assert shards == ["000000.npz", "000002.npz"]                               # process 0's chunks kept
    counted: list = []
    _reference(image_encoder, out, counted)                                     # the rerun, one process
    assert sum(counted) == 256                                                  # only the dead one's chunk
    _reference(image_encoder, tmp_path / "ref.safetensors")
    assert out.read_bytes() == (tmp_path / "ref.safetensors").read_bytes()


# -------------------------------------------------------------------------------------------- train
def _text_corpus(path: Path) -> str:
    colours, things = ["red", "green", "blue", "yellow", "black"], ["cat", "ball", "car", "tree", "house", "boat"]
    scenes = [[f"a {c} {t}.", f"the {t} is {c}.", f"a picture of a {c} {t}"] for c in colours for t in things]
    path.write_text(json.dumps(scenes))
    return str(path)


KINDS = {"text-jepa": lambda tmp: ["--corpus", _text_corpus(tmp / "scenes.json")],
         "image-jepa": lambda tmp: ["--corpus", "scenelab", "--n-scenes", "32"]}


def _train_here(kind: str, extra: list, out: Path, steps: int, resume: bool = False):
    from click.testing import CliRunner

    from captioner.commands.train import cli

    args = [kind, *extra, "--batch-size", "16", "--steps", str(steps), "--save-every", "2", "--out", str(out),
            "--quiet", *(["--resume"] if resume else [])]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("kind", list(KINDS))
def test_train_two_processes_match_one_and_checkpoints_move_between_them(kind, tmp_path):
    """One process 0-2, two processes 2-4 (resuming the one-process checkpoint), one process 4-6 (resuming
    the two-process one): every logged loss within REL_TOL of one uninterrupted process."""
    extra = KINDS[kind](tmp_path)
    _train_here(kind, extra, tmp_path / "ref", 6)
    ref = _log(tmp_path / "ref")
    run = tmp_path / "run"
    _train_here(kind, extra, run, 2)
    launch(["train", kind, *extra, "--batch-size", "16", "--steps", "4", "--save-every", "2", "--out", str(run),
            "--resume", "--quiet"], tmp_path / "home")
    import torch

    assert torch.load(run / "checkpoint.pt", weights_only=True)["step"] == 4
    _train_here(kind, extra, run, 6, resume=True)
    got = _log(run)
    assert sorted(got) == [1, 2, 3, 4, 5, 6]
    assert got[1] == ref[1] and got[2] == ref[2]                                # same process count: exact
    worst = max(_rel(got[s], ref[s]) for s in range(3, 7))
    assert worst <= REL_TOL, (worst, got, ref)
    assert ref[6] != ref[3]                                                     # it did train
    drift = _weight_drift(tmp_path / "ref", run)
    assert drift <= WEIGHT_TOL, drift


def test_train_processes_that_disagree_all_stop_with_one_line(tmp_path):
    extra = KINDS["image-jepa"](tmp_path)
    base = ["train", "image-jepa", *extra, "--batch-size", "16", "--steps", "2", "--out", str(tmp_path / "r"),
            "--quiet"]
    res = by_hand([base + ["--seed", "0"], base + ["--seed", "1"]], tmp_path / "home")
    lines = [_error_lines(err) for _, err in res]
    assert [code for code, _ in res] == [2, 2] and lines[0] == lines[1] and len(lines[0]) == 1, res
    assert lines[0][0].startswith("error: the 2 processes of this launch disagree on the training run: seed is 0 "
                                  "on process 0 but 1 on process 1"), lines
    assert not (tmp_path / "r" / "checkpoint.pt").exists()


def test_train_process_killed_keeps_the_last_checkpoint_and_a_rerun_resumes(tmp_path):
    extra = KINDS["image-jepa"](tmp_path)
    _train_here("image-jepa", extra, tmp_path / "ref", 4)
    run = tmp_path / "run"
    args = ["train", "image-jepa", *extra, "--batch-size", "16", "--steps", "4", "--save-every", "2", "--out",
            str(run), "--quiet"]
    (code0, err0), (code1, _) = by_hand([args, args], tmp_path / "home", DIE_RANK=1, DIE_AT="step:3")
    assert code1 == 9 and code0 == 2
    line = _error_lines(err0)
    assert len(line) == 1 and line[0].startswith("error: process 0 of 2: lost contact with another process of "
                                                 "this launch during training step 3"), err0
    assert "Traceback" not in err0
    import torch

    assert torch.load(run / "checkpoint.pt", weights_only=True)["step"] == 2     # the last good one, whole
    assert not list(run.glob(".*.tmp"))
    _train_here("image-jepa", extra, run, 4, resume=True)                        # the rerun, one process
    got, ref = _log(run), _log(tmp_path / "ref")
    assert sorted(got) == [1, 2, 3, 4]
    assert max(_rel(got[s], ref[s]) for s in got) <= REL_TOL, (got, ref)


# -------------------------------------------------------------------------------------------- world
WORLD = ["world", "train", "--preset", "smoke", "--quiet"]   # 3 models x 4 steps, batch 16, 64 scenes
RUNS = ("image-jepa", "text-jepa", "ntp")


class _Stop(Exception):
    pass


def _world_here(monkeypatch, home: Path, stop_at: tuple | None = None):
    """`captioner world train --preset smoke` in this process (one process); ``stop_at`` = (kind, step):
    stopped at that step's batch, as a kill would (the checkpoint of the step before is kept)."""
    from click.testing import CliRunner

    import captioner.jepa.processes as proc
    from captioner.commands.world import cli

    monkeypatch.setenv("CAPTIONER_HOME", str(home))
    if stop_at:
        real = proc.step_batch

        def step_batch(data, cfg, step, rank, world):
            if (cfg.kind, step + 1) == stop_at:
                raise _Stop
            return real(data, cfg, step, rank, world)

        monkeypatch.setattr(proc, "step_batch", step_batch)
    res = CliRunner().invoke(cli, WORLD[1:])
    if stop_at:
        monkeypatch.setattr(proc, "step_batch", real)
        assert isinstance(res.exception, _Stop), res.output
    else:
        assert res.exit_code == 0, res.output


def _steps(folder: Path) -> dict:
    import torch

    return {k: torch.load(folder / k / "checkpoint.pt", weights_only=True)["step"]
            for k in RUNS if (folder / k / "checkpoint.pt").exists()}


def test_world_train_two_processes_match_one_and_checkpoints_move_between_them(tmp_path, monkeypatch):
    """The world's three models trained across three launches: two processes by hand (killed at text JEPA
    step 3), one process (stopped at next-token step 3), then the documented `accelerate launch` to the end;
    every logged loss within REL_TOL of one uninterrupted process, the final weights within WEIGHT_TOL."""
    _world_here(monkeypatch, tmp_path / "ref")
    ref = tmp_path / "ref" / "world" / "smoke-s0"
    home = tmp_path / "home"
    folder = home / "world" / "smoke-s0"
    (code0, err0), (code1, _) = by_hand([WORLD, WORLD], home, DIE_RANK=1, DIE_AT="step:3:text-jepa")
    assert code1 == 9 and code0 == 2
    line = _error_lines(err0)
    assert len(line) == 1 and line[0].startswith("error: process 0 of 2: lost contact with another process of "
                                                 "this launch during training step 3"), err0
    assert _steps(folder) == {"image-jepa": 4, "text-jepa": 2} and not (folder / "world.json").exists()
    _world_here(monkeypatch, home, stop_at=("ntp", 3))                           # 2 -> 1 process: text JEPA
    assert _steps(folder) == {"image-jepa": 4, "text-jepa": 4, "ntp": 2} and not (folder / "world.json").exists()
    launch(WORLD, home)                                                          # 1 -> 2 processes: the LM
    assert _steps(folder) == {k: 4 for k in RUNS} and not list(folder.rglob(".*.tmp"))
    meta = json.loads((folder / "world.json").read_text())
    assert meta["preset"] == "smoke" and (folder / "untrained" / "checkpoint.pt").exists()
    for k in RUNS:
        got, want = _log(folder / k), _log(ref / k)
        assert sorted(got) == [1, 2, 3, 4], (k, got)
        worst = max(_rel(got[s], want[s]) for s in got)
        assert worst <= REL_TOL, (k, worst, got, want)
        assert want[4] != want[1]                                                # it did train
        drift = _weight_drift(ref / k, folder / k)
        assert drift <= WEIGHT_TOL, (k, drift)


def test_world_train_processes_that_disagree_all_stop_with_one_line(tmp_path):
    res = by_hand([WORLD + ["--seed", "0"], WORLD + ["--seed", "1"]], tmp_path / "home")
    lines = [_error_lines(err) for _, err in res]
    assert [code for code, _ in res] == [2, 2] and lines[0] == lines[1] and len(lines[0]) == 1, res
    assert lines[0][0].startswith("error: the 2 processes of this launch disagree on the world to train: seed "
                                  "is 0 on process 0 but 1 on process 1"), lines
    assert "Traceback" not in res[0][1] + res[1][1]
    assert not (tmp_path / "home" / "world").exists()                           # nothing written
