"""Size limits of the library: one idea a file (<= 500 lines), functions that fit on a screen (<= 80 lines)
unless their docstring starts with the reason ("Long: ...")."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("captioner", "alignment", "eval")
MAX_FILE, MAX_FUNCTION = 500, 80


def _files():
    return sorted(p for pkg in LIBRARY for p in (ROOT / pkg).rglob("*.py"))


def test_no_library_file_over_500_lines():
    big = {str(p.relative_to(ROOT)): n for p in _files() if (n := len(p.read_text().splitlines())) > MAX_FILE}
    assert big == {}


def test_no_function_over_80_lines_without_a_reason():
    long = []
    for p in _files():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                doc = ast.get_docstring(node) or ""
                if n > MAX_FUNCTION and not doc.startswith("Long:"):
                    long.append(f"{p.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert long == []


def test_the_limits_bite():
    """The checks above see a long function and a long file (so an empty result means something)."""
    src = "def f():\n" + "    x = 1\n" * 90
    fn = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef))
    assert fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION
    assert len(_files()) > 40 and all(p.suffix == ".py" for p in _files())
