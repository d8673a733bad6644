"""eval/experiments/pairfree_identifiability.py: the verdict table (the run itself needs the real encoders)."""
from eval.experiments.pairfree_identifiability import table


def test_table_names_each_objective_and_its_verdict():
    res = {"n": 4, "dim": 2, "rows": {"paired (true)": {"gw": 0.1}, "pair-free wp": {"gw": 0.08}, "random": {"gw": 0.13}},
           "verdict": {"gw": "a wrong answer scores lower than the true one"}}
    t = table(res)
    assert "| paired (true) | 0.1000 |" in t and "| pair-free wp | 0.0800 |" in t
    assert "- gw: a wrong answer scores lower than the true one" in t
