"""The package as a user installs it: a wheel that carries every data file the code loads, and a
non-editable install that runs the CLI and a tiny training (no network: the dependencies come from the
project's own environment)."""
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("captioner", "alignment")   # what the wheel installs; eval/ (the experiments) stays in the checkout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the source files (a build in the checkout would leave build/ behind,
    whose stale copies could slip into later wheels)."""
    import shutil

    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    # --no-build-isolation: setuptools from this environment (an isolated build would download it)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                    "--quiet", "-w", str(out)], check=True, cwd=out, timeout=300,
                   env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    (whl,) = out.glob("pairfree_captioner-*.whl")
    return whl


def _data_files() -> list[str]:
    """Every non-Python file inside the packages that git tracks: what the code can load at run time."""
    out = subprocess.run(["git", "ls-files", *PACKAGES], cwd=ROOT, capture_output=True, text=True, check=True)
    return [f for f in out.stdout.split() if not f.endswith(".py") and "/tests/" not in f]


def _find_include() -> list[str]:
    """pyproject.toml's ``[tool.setuptools.packages.find] include``."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]


def test_package_discovery_installs_the_product_and_not_the_experiments():
    """setuptools' discovery with the configured include: captioner and alignment with their subpackages,
    no top-level eval (it would shadow nothing but claim the name ``eval`` in site-packages)."""
    from setuptools import find_packages

    found = find_packages(str(ROOT), include=_find_include())
    assert {"captioner", "captioner.evaluation", "captioner.world", "captioner.jepa", "alignment"} <= set(found)
    assert [p for p in found if p.split(".")[0] not in PACKAGES] == []
    assert "eval" in find_packages(str(ROOT))          # it is a package in the checkout, just not installed


def test_the_wheel_holds_every_module_and_data_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    data = _data_files()
    assert "captioner/jepa/presets/tiny.json" in data and "captioner/data/imagenet100.txt" in data
    missing = [f for f in data if f not in names]
    assert not missing, f"the wheel lacks data files the code loads: {missing}"
    py = subprocess.run(["git", "ls-files", *PACKAGES], cwd=ROOT, capture_output=True, text=True,
                        check=True).stdout.split()
    assert [f for f in py if f.endswith(".py") and f not in names] == []
    assert [n for n in names if n.split("/")[0] == "eval"] == []    # the experiments are not installed
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    for dep in ("Requires-Dist: torch>=2.1", "Requires-Dist: transformers", "Requires-Dist: onnxruntime",
                'Requires-Dist: gradio>=5.0; extra == "demo"', 'Requires-Dist: pycocoevalcap==1.2; extra == "eval"'):
        assert dep in text, dep


@pytest.mark.slow
def test_a_non_editable_install_runs_the_cli_and_trains(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python*/site-packages"))
    # the dependencies: this environment's packages, read-only, behind the fresh venv's own
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    py = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--ignore-installed", "--quiet",
                    "--no-index", str(wheel)], check=True, timeout=300,
                   env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(CAPTIONER_HOME=str(tmp_path / "home"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    where = subprocess.run([str(py), "-c", "import captioner; print(captioner.__file__)"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(site)), f"imported {where}, not the installed wheel"
    cli = venv / "bin" / "captioner"
    r = subprocess.run([str(cli), "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "caption" in r.stdout and "train" in r.stdout
    corpus = tmp_path / "views.json"  # scenes, each with several descriptions (the JEPA's views)
    corpus.write_text(json.dumps({f"s{i}": [f"a {c} thing number {i}", f"the {c} item {i}", f"thing {i} is {c}"]
                                  for i, c in enumerate(["red", "green", "blue", "small", "large", "round"] * 2)}))
    r = subprocess.run([str(cli), "train", "text-jepa", "--preset", "tiny", "--corpus", str(corpus), "--steps", "3",
                        "--batch-size", "4", "--threads", "1", "--quiet", "--json", "--out", str(tmp_path / "run")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["step"] == 3  # the tiny preset was found inside the installed package
    assert (tmp_path / "run" / "config.json").exists()
