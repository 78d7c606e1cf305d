"""The seed's case end to end, on the real multilingual embedder: one instance over three
repositories — a person's portfolio documents, an assistant with prompt templates and task
files, a tools repository — with the templates and task files excluded by root-level ``**``
patterns. "What projects has Ana García built?" and "¿Qué proyectos ha construido Ana García?"
are answered from the portfolio, never from the other repositories' templates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from helpers import make_repo

from core.config import Settings
from core.service import RepoExpert

PORTFOLIO = {
    "README.md": """
        # Ana García

        Software engineer in Valencia. This repository holds my career history and the
        projects I have built.
        """,
    "projects.md": """
        # Projects

        Projects Ana García has built:

        - **Tidewatch**: a flood-forecasting dashboard for the port of Valencia, built with
          Python and PostGIS; it warns harbour staff six hours ahead.
        - **Recetario**: a recipe-sharing mobile app with offline sync, built in Kotlin.
        - **Ledgerly**: an open-source double-entry bookkeeping library for small shops.
        """,
    "career.md": """
        # Career

        2019–2022: backend engineer at Marítima, data pipelines for shipping schedules.
        2022–now: lead engineer at Huerta Labs.
        """,
}
ASSISTANT = {
    "README.md": """
        # Assistant

        A chat assistant that drafts documents from prompt templates.
        """,
    "assistant/render.py": '''
        def render_prompt(template, **values):
            """Fill a prompt template with the given values."""
            return template.format(**values)
        ''',
    "prompts/portfolio.md": """
        # Prompt: portfolio projects

        What projects has {name} built? List the projects {name} has built, one per line.
        ¿Qué proyectos ha construido {name}? Enumera los proyectos.
        """,
    "tasks/write-projects.md": """
        # Task: projects section

        Write the projects section: what projects has Ana García built? Projects built by Ana.
        """,
}
TOOLS = {
    "README.md": """
        # Tools

        Scripts that publish the portfolio site.
        """,
    "tools/publish.sh": """
        #!/bin/sh
        rsync -a site/ server:/var/www/portfolio/
        """,
    "templates/projects.md": """
        # Template: projects

        Projects {name} has built: {projects}. Proyectos que ha construido {name}.
        """,
}
EXCLUDED = ("prompts/", "tasks/", "templates/")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("portfolio")
    for name, files in (("portfolio", PORTFOLIO), ("assistant", ASSISTANT), ("tools", TOOLS)):
        make_repo(tmp / name, files)
    (tmp / "instances").mkdir()
    (tmp / "instances" / "ana.yaml").write_text(
        "exclude: ['**/tasks/**', '**/prompts/**', '**/templates/**']\n"
        "embedding: {backend: e5int8}\n"
        "repos:\n"
        f"  - {{name: portfolio, path: {tmp / 'portfolio'}, "
        "web_url: 'https://github.com/ana/portfolio'}\n"
        f"  - {{name: assistant, path: {tmp / 'assistant'}, "
        "web_url: 'https://github.com/ana/assistant'}\n"
        f"  - {{name: tools, path: {tmp / 'tools'}, web_url: 'https://github.com/ana/tools'}}\n"
    )
    return {"tmp": tmp, "inst": tmp / "instances", "data": tmp / "data"}


@pytest_asyncio.fixture
async def app(world: dict[str, Path]) -> Any:
    app = RepoExpert(Settings(world["inst"], world["data"]))
    if not await app.has_index("ana"):
        s = await app.index("ana")
        assert set(s.repos) == {"portfolio", "assistant", "tools"}
    yield app
    await app.close()


@pytest.mark.slow
@pytest.mark.asyncio
async def test_templates_and_tasks_are_excluded(app: RepoExpert) -> None:
    reader = await app.reader("ana")
    units = await reader.units()
    assert "portfolio:projects.md" in units and "assistant:assistant/render.py" in units
    assert not [k for k in units if any(x in k for x in EXCLUDED)]


@pytest.mark.slow
@pytest.mark.asyncio
@pytest.mark.parametrize(
    "question", ["What projects has Ana García built?", "¿Qué proyectos ha construido Ana García?"]
)
async def test_projects_answered_from_the_portfolio(app: RepoExpert, question: str) -> None:
    answer = await app.ask("ana", question)
    assert answer.sources, question
    assert answer.sources[0].repo == "portfolio", answer.sources
    top = next(s for s in answer.sources if s.path == "projects.md")
    assert top.repo == "portfolio" and f"[{top.n}]" in answer.text
    assert top.url.startswith("https://github.com/ana/portfolio/blob/")
    assert top.location().startswith("portfolio: projects.md:")
    assert "Tidewatch" in answer.text and "[1]" in answer.text
    assert not [s for s in answer.sources if s.path and s.path.startswith(EXCLUDED)]
    cited = [s for s in answer.sources if f"[{s.n}]" in answer.text]
    assert cited and {s.repo for s in cited} == {"portfolio"}


@pytest.mark.slow
def test_cli_ask_json_carries_repo_and_repo_filters(world: dict[str, Path]) -> None:
    def ask(*args: str) -> dict[str, Any]:
        r = subprocess.run(
            [sys.executable, "-m", "core.cli", "--instances", str(world["inst"]),
             "--data", str(world["data"]), "ask", "ana", *args, "--json"],
            capture_output=True, text=True, timeout=600, check=False,
            cwd=Path(__file__).parent.parent,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        out: dict[str, Any] = json.loads(r.stdout)
        return out

    out = ask("What projects has Ana García built?")
    assert out["sources"][0]["repo"] == "portfolio"
    assert all(s["repo"] in ("portfolio", "assistant", "tools") for s in out["sources"])
    out = ask("how is the site published?", "--repo", "tools")
    assert out["sources"] and {s["repo"] for s in out["sources"]} == {"tools"}
    r = subprocess.run(
        [sys.executable, "-m", "core.cli", "--instances", str(world["inst"]),
         "--data", str(world["data"]), "ask", "ana", "anything", "--repo", "nope"],
        capture_output=True, text=True, timeout=600, check=False, cwd=Path(__file__).parent.parent,
    )  # fmt: skip
    assert r.returncode != 0 and "no such repository in this instance" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
