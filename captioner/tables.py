"""One Markdown table writer for every table a person reads (reports, experiments, benchmarks).

>>> print(markdown_table(["rotation", "CIDEr"], [["paired", "18.6"], ["random", "1.6"]], align="lr"))
| rotation | CIDEr |
| --- | ---: |
| paired | 18.6 |
| random | 1.6 |
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence


def markdown_table(header: Sequence, rows: Iterable[Sequence], align: str | Sequence[str] | None = None,
                   compact: bool = False) -> str:
    """A GitHub Markdown table: a header line, the separator, one line per row; no trailing newline.

    Parameters
    ----------
    header : the column titles (any values; printed with ``str``).
    rows : one sequence of cells per row, already formatted (numbers are printed with ``str``).
    align : one letter per column, "l" (left, the default) or "r" (right: ``---:``); a string "llr" or a list.
    compact : the separator as ``|---|---:|`` (else ``| --- | ---: |``), for tables whose bytes are pinned.
    """
    n = len(header)
    align = list(align or "l" * n)
    if len(align) != n or set(align) - {"l", "r"}:
        raise ValueError(f"align needs one of 'l' / 'r' per column ({n}), got {''.join(align)!r}")
    marks = ["---:" if a == "r" else "---" for a in align]
    sep = "|" + "|".join(marks) + "|" if compact else "| " + " | ".join(marks) + " |"

    def line(cells) -> str:
        return "| " + " | ".join(str(c) for c in cells) + " |"

    return "\n".join([line(header), sep, *(line(r) for r in rows)])
