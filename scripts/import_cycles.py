"""Import circles among the project's own modules, counting imports inside functions too (the lazy ones).

    python scripts/import_cycles.py [captioner eval alignment]

Prints each strongly connected group of modules that import one another (directly or round a circle) and
exits 1 when there is one; prints "no import circle" and exits 0 otherwise. Static (ast): nothing is
imported. A package's ``__init__`` counts as the package's module.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def graph(packages: list[str]) -> dict[str, set[str]]:
    """module -> the project modules it imports (anywhere in its body)."""
    files = {module_name(p): p for pkg in packages for p in (ROOT / pkg).rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # "from a.b import c": the module a.b.c when it is one, else a.b
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                           for a in node.names]
            else:
                continue
            edges[mod].update(t for t in targets if t in files and t != mod)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main(argv=None) -> int:
    packages = (argv if argv is not None else sys.argv[1:]) or ["captioner", "eval", "alignment"]
    found = circles(graph(packages))
    for comp in found:
        print("import circle: " + " <-> ".join(comp))
    if not found:
        print("no import circle")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
