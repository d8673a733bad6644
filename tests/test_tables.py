"""The one Markdown table writer: known bytes for both separator styles, alignment, bad alignment."""
import pytest

from captioner.tables import markdown_table


def test_markdown_table_bytes():
    assert markdown_table(["a", "b"], [[1, "x"], ["2", 3.5]]) == "| a | b |\n| --- | --- |\n| 1 | x |\n| 2 | 3.5 |"
    assert markdown_table(["a", "b", "c"], [], align="lrr", compact=True) == "| a | b | c |\n|---|---:|---:|"
    assert markdown_table(("k",), [("v",)], align=["r"]) == "| k |\n| ---: |\n| v |"


def test_markdown_table_refuses_an_alignment_of_the_wrong_length_or_letter():
    with pytest.raises(ValueError, match="one of 'l' / 'r' per column"):
        markdown_table(["a", "b"], [], align="l")
    with pytest.raises(ValueError, match="per column"):
        markdown_table(["a"], [], align="c")
