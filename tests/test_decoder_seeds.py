"""The decoder-seed experiment's summary and table (the decoders themselves train in minutes: not here), and the
captions the experiments hold out."""
import pytest


def test_summary_and_table_of_seed_rows():
    from eval.experiments.decoder_seeds import summarise, table

    rows = [{"seed": 0, "paired": 10.0, "head": 12.0}, {"seed": 1, "paired": 14.0, "head": 18.0}]
    s = summarise(rows)
    assert s["paired"] == {"mean": 12.0, "sd": pytest.approx(2 ** 1.5), "min": 10.0, "max": 14.0}
    assert s["head"]["mean"] == 15.0
    assert summarise(rows[:1])["head"]["sd"] == 0.0
    res = {"dataset": "tuxpaint/test", "n_images": 85, "steps": "preset", "retrieval": {"paired": 20.0, "head": 8.0},
           "decoder": rows, "summary": s}
    text = table(res)
    assert "| 0 | 10.0 | 12.0 | 120 % | 60 % |" in text
    assert "| mean ± sd | 12.0 ± 2.8 | 15.0 ± 4.2 | 125 % | 75 % |" in text


def test_bad_seed_list_is_a_usage_error(capsys):
    from eval.cli import main

    with pytest.raises(SystemExit) as e:
        main(["experiment", "decoder-seeds", "--seeds", "a,b"])
    assert e.value.code == 2 and "comma-separated list of seeds" in capsys.readouterr().err


def test_held_out_captions_are_test_always_and_the_scored_split_too():
    from captioner.datasets import get_dataset
    from eval.experiments import held_out_captions

    test, val = get_dataset("tuxpaint", "test").captions(), get_dataset("tuxpaint", "val").captions()
    assert held_out_captions("test") == test  # the pipeline's own default exclusion
    assert held_out_captions("val") == test + val
