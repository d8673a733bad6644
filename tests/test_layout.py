"""The package layout: no import circle among the JEPAs, the world and the experiments (lazy imports included),
the world generator (``captioner.world.scenes``) a library that imports nothing from training or experiments,
and imports one way between the three packages: the product (``captioner``) and the math (``alignment``) never
import the experiments (``eval``), and ``alignment`` imports nothing from ``captioner``."""
from __future__ import annotations

import ast
import importlib
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


def _imports_of(edges: dict, importers: tuple, imported: str) -> set:
    """(module, target) for every import (lazy ones too) of ``imported`` or its modules by ``importers``."""
    return {(m, t) for m, ts in edges.items() if m.split(".")[0] in importers for t in ts
            if t.split(".")[0] == imported}


def test_the_product_and_the_math_never_import_the_experiments():
    """captioner/ and alignment/ install without eval/ (pyproject's packages.find): an import of eval from
    either, even inside a function, would break the installed product."""
    tool = _tool()
    edges = tool.graph(["captioner", "eval", "alignment"])
    assert {("captioner.world.recipe", "captioner.world.scenes")} <= {
        (m, t) for m, ts in edges.items() for t in ts}             # the graph sees the product's own imports
    assert _imports_of(edges, ("captioner", "alignment"), "eval") == set()
    # nor by name: a module path handed to importlib (the CLI's lazy groups) is a string constant
    named = [(str(p.relative_to(ROOT)), node.value) for pkg in ("captioner", "alignment")
             for p in (ROOT / pkg).rglob("*.py") for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and node.value.startswith("eval.") and " " not in node.value]
    assert named == []


def test_the_math_imports_nothing_from_the_product():
    edges = _tool().graph(["captioner", "eval", "alignment"])
    assert len([m for m in edges if m.startswith("alignment")]) > 10
    assert _imports_of(edges, ("alignment",), "captioner") == set()


def test_the_experiments_runner_registers_every_experiment_and_the_product_none():
    """``python -m eval``: every command's module exists and has its attribute; every module of
    eval/experiments is one ``experiment`` command; ``captioner`` has no experiment command left."""
    from captioner.cli import COMMANDS as PRODUCT
    from eval.cli import COMMANDS
    from eval.experiments import EXPERIMENTS

    for module, attr, _ in COMMANDS.values():
        assert hasattr(importlib.import_module(module), attr), (module, attr)
    mods = {p.stem.replace("_", "-") for p in (ROOT / "eval" / "experiments").glob("*.py") if p.stem != "__init__"}
    assert set(EXPERIMENTS) == mods
    for name in EXPERIMENTS:
        assert importlib.import_module(f"eval.experiments.{name.replace('-', '_')}").cli.name == name
    assert not {"report", "scaling", "scenelab"} & set(PRODUCT)
    assert all(m.startswith("captioner.") for m, _, _ in PRODUCT.values())


def test_no_module_imports_another_modules_private_names():
    """Outside tests, ``from x import _name`` (a private name of another module) appears nowhere in captioner/,
    alignment/ or eval/: what one module needs of another is public there (lazy imports included)."""
    import ast

    hits = []
    for pkg in ("captioner", "alignment", "eval"):
        for f in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    hits += [f"{f.relative_to(ROOT)}:{node.lineno} {node.module}.{a.name}" for a in node.names
                             if a.name.startswith("_") and not a.name.startswith("__")]
    assert hits == [], hits
