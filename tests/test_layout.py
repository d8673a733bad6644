"""The package layout: no import circle among the JEPAs, the world and the experiments (lazy imports included),
and the world generator (``captioner.world.scenes``) a library that imports nothing from training or experiments."""
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


OWN = ("captioner.jepa", "captioner.world", "eval.scenelab", "eval.scaling")


def test_no_import_circle_among_the_jepas_the_world_and_their_experiments():
    """The training library, the world and the lab / scaling experiments import one another one way only
    (a circle through other packages is that package's to mend: scripts/import_cycles.py lists all)."""
    tool = _tool()
    edges = tool.graph(["captioner", "eval", "alignment"])
    own = {m: {t for t in ts if t.startswith(OWN)} for m, ts in edges.items() if m.startswith(OWN)}
    assert len(own) > 15 and tool.circles(own) == []


def test_the_world_generator_imports_no_training_and_no_experiment():
    edges = _tool().graph(["captioner", "eval", "alignment"])
    bad = {t for t in edges["captioner.world.scenes"] if t.startswith(("captioner.jepa", "eval"))}
    assert not bad, f"captioner.world.scenes imports {bad}"


def test_no_import_circle_anywhere_in_the_library():
    """captioner/, eval/ and alignment/ as a whole: every import (lazy ones too) goes one way."""
    tool = _tool()
    edges = tool.graph(["captioner", "eval", "alignment"])
    assert len(edges) > 100 and tool.circles(edges) == []
