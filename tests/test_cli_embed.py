import json
import os

import pytest

from captioner.cli import main

HAS_TUX = os.path.isdir("/usr/share/tuxpaint/stamps")


def run(capsys, *args):
    main(list(args))
    return capsys.readouterr()


def test_help_lists_nouns(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for noun in ("embed", "align", "caption", "eval", "train", "demo"):
        assert noun in out


def test_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["embed", "--encoder", "nope", "--dataset", "samples", "--split", "all"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown encoder 'nope'") and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.skipif(not HAS_TUX, reason="tuxpaint-stamps-default not installed")
def test_embed_tuxpaint_twice_reuses_cache(capsys):
    first = json.loads(run(capsys, "embed", "-e", "efficientnet-lite0", "-d", "tuxpaint", "-s", "val",
                           "--json").out)
    second = json.loads(run(capsys, "embed", "-e", "efficientnet-lite0", "-d", "tuxpaint", "-s", "val",
                            "--json").out)
    assert first["N"] == second["N"] == 49 and first["D"] == 1280 and first["path"] == second["path"]
    assert second["seconds"] < first["seconds"] / 10
