"""Shared fixtures: every test runs with its own $CAPTIONER_HOME, on CPU, with no network."""
from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def captioner_home(tmp_path, monkeypatch):
    """A fresh state folder per test, so no test sees another's caches."""
    home = tmp_path / "captioner-home"
    monkeypatch.setenv("CAPTIONER_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def shared_home(tmp_path_factory):
    """A state folder shared by the slow tests that load real models (built once per session)."""
    return tmp_path_factory.mktemp("shared-home")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def one_torch_thread():
    """Tiny tensors on shared cores: one intra-op torch thread is many times faster than two contended ones.
    Test modules take it with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
