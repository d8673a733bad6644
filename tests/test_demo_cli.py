"""``captioner demo``: options reach the pipeline and the server; loopback by default."""
from __future__ import annotations

import sys
import types

from click.testing import CliRunner

from captioner.cli import cli
from tests.demo_fakes import FakePipeline


def test_demo_help():
    r = CliRunner().invoke(cli, ["demo", "--help"])
    assert r.exit_code == 0
    assert "--host" in r.output and "127.0.0.1" in r.output and "--port" in r.output and "7860" in r.output


def test_demo_builds_warms_and_launches(monkeypatch):
    import captioner.demo as demo

    built, launched = [], []
    monkeypatch.setitem(sys.modules, "captioner.pipeline", types.SimpleNamespace(Pipeline=FakePipeline))

    def fake_build(pipe, **kw):
        built.append((pipe, kw))
        return "APP"

    monkeypatch.setattr(demo, "build_app", fake_build)
    monkeypatch.setattr(demo, "launch", lambda app, **kw: launched.append((app, kw)))
    r = CliRunner().invoke(cli, ["demo", "--port", "7999", "--text-encoder", "minilm-l3"])
    assert r.exit_code == 0, r.output
    (pipe, kw), = built
    assert (pipe.image_encoder, pipe.text_encoder, pipe.device) == ("efficientnet-lite0", "minilm-l3", "cpu")
    assert kw == {"concurrency_limit": 2}
    assert launched == [("APP", {"host": "127.0.0.1", "port": 7999, "block": True})]


def test_demo_rejects_a_bad_port():
    r = CliRunner().invoke(cli, ["demo", "--port", "70000"])
    assert r.exit_code == 2 and "70000" in r.output
