"""The package layout: no import circle among the project's modules (lazy imports included), and the
world generator (``captioner.world.scenes``) a library that imports nothing from training or experiments."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location("import_cycles", ROOT / "scripts" / "import_cycles.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_circle_finder_finds_a_known_circle():
    tool = _tool()
    assert tool.circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert tool.circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle():
    tool = _tool()
    assert tool.circles(tool.graph(["captioner", "eval", "alignment"])) == []


def test_the_world_generator_imports_no_training_and_no_experiment():
    edges = _tool().graph(["captioner", "eval", "alignment"])
    bad = {t for t in edges["captioner.world.scenes"] if t.startswith(("captioner.jepa", "eval"))}
    assert not bad, f"captioner.world.scenes imports {bad}"
