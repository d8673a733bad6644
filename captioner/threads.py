"""CPU thread counts and spinning for torch and onnxruntime, decided in one place.

On a shared machine, torch's default (one OpenMP thread per core, workers that spin while they wait)
collapses: each parallel region waits for its slowest thread, and a thread that lost its core to another
process holds all the others up while they burn the CPU share spinning (decoder training measured 0.057
s/step quiet vs 2-4 s/step at load 9-12). The settings here make the work degrade in proportion to the CPU
share it gets: idle workers sleep (``OMP_WAIT_POLICY=PASSIVE``, onnxruntime ``allow_spinning=0``), one
inter-op thread, and as many intra-op threads as there are idle cores when the process starts (``auto``:
cores minus the 1-minute load average, at least 1). ``docs/performance.md`` has the figures.

``$CAPTIONER_THREADS`` overrides the count: a number, ``auto`` (default), or ``torch`` (torch's and
onnxruntime's own defaults, spinning included: the behaviour before these settings).
``configure()`` is idempotent and cheap; it is called by the CLI before any command runs and by the code
that makes torch or onnxruntime do work (decoder training and decoding, the encoders).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

ENV = "CAPTIONER_THREADS"


@dataclass(frozen=True)
class Settings:
    threads: int | None  # intra-op threads; None = the libraries' own defaults
    spinning: bool  # idle workers spin (True) or sleep (False)
    source: str  # what decided it: "auto (load 1.2 on 2 cores)", "$CAPTIONER_THREADS=1", ...


_APPLIED: Settings | None = None


def resolve(value: str | None = None, cores: int | None = None, load: float | None = None) -> Settings:
    """The settings for ``value`` (default: ``$CAPTIONER_THREADS`` or ``auto``) on ``cores`` cores at 1-minute
    load ``load`` (default: this machine's). Raises CaptionerError on a value that is none of the above."""
    from captioner.errors import CaptionerError

    value = (value if value is not None else os.environ.get(ENV, "")).strip().lower() or "auto"
    cores = cores or os.cpu_count() or 1
    if value == "torch":
        return Settings(None, True, f"${ENV}=torch (library defaults)")
    if value == "auto":
        if load is None:
            try:
                load = os.getloadavg()[0]
            except OSError:
                load = 0.0
        n = max(1, min(cores, int(cores - load + 0.5)))
        return Settings(n, False, f"auto (load {load:.1f} on {cores} cores)")
    if value.isdigit() and int(value) >= 1:
        return Settings(int(value), False, f"${ENV}={value}")
    raise CaptionerError(f"${ENV} must be a positive number, 'auto' or 'torch', not {value!r}")


def configure(value: str | None = None) -> Settings:
    """Apply the settings once per process (later calls return them): the OpenMP environment for a torch
    not yet imported, ``torch.set_num_threads`` / ``set_num_interop_threads`` for one already imported."""
    global _APPLIED
    if _APPLIED is not None and value is None:
        return _APPLIED
    s = resolve(value)
    if s.threads is not None:
        if "torch" not in sys.modules:  # read by libgomp / MKL when torch loads them
            os.environ["OMP_NUM_THREADS"] = str(s.threads)
            os.environ["MKL_NUM_THREADS"] = str(s.threads)
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        else:
            torch = sys.modules["torch"]
            torch.set_num_threads(s.threads)
            try:
                torch.set_num_interop_threads(1)
            except RuntimeError:
                pass  # already fixed by earlier parallel work in this process
    _APPLIED = s
    return s


def count() -> int:
    """The intra-op thread count in force (the library default, torch's, when ``torch`` is chosen)."""
    s = configure()
    if s.threads is not None:
        return s.threads
    torch = sys.modules.get("torch")
    return max(1, int(torch.get_num_threads())) if torch is not None else (os.cpu_count() or 1)


def ort_options(threads: int | None = None):
    """onnxruntime SessionOptions with the thread count and spinning in force (sequential execution)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads or count()
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # spinning off in every mode: onnxruntime held up under load with it off (its idle workers sleep)
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.log_severity_level = 3
    return so
