"""Issue 17, item 2: an instance name never becomes a path outside the data folder — not from a
file named ``...yaml`` (instance ``..``), not from the command line's argument."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import sample_world
from rigs import cli, one_line

from core.errors import ConfigError
from core.layout import Layout


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_an_instance_file_named_dot_dot_is_refused_and_names_the_file(tmp_path: Path) -> None:
    world = tmp_path / "w"
    world.mkdir()
    _, _, inst = sample_world(world)
    shutil.copy(inst / "widget.yaml", inst / "...yaml")
    data = world / "data"
    before = tree(tmp_path)
    for args in (["instances"], ["status", "--all"], ["sync", "--all"]):  # every file is read
        one_line(cli(inst, data, *args), "...yaml", "'..'", "letters, digits")
    for args in (["index", ".."], ["ask", "..", "q"]):  # the argument itself is refused
        one_line(cli(inst, data, *args), "'..'", "letters, digits")
    # Nothing was written next to the data folder (no .lock, builds/ or current there).
    assert tree(tmp_path) - before <= {"w/data"}, tree(tmp_path) - before


@pytest.mark.parametrize("name", ["../../outside", "..", "/etc", "a/b", ".hidden"])
def test_a_name_argument_that_leaves_the_data_folder_is_one_line(tmp_path: Path, name: str) -> None:
    world = tmp_path / "w"
    world.mkdir()
    _, _, inst = sample_world(world)
    data = world / "data"
    # A build-shaped folder where the name would lead: it must never be opened.
    bait = (data / name).resolve() / "current"
    if str(bait).startswith(str(tmp_path)):
        bait.mkdir(parents=True)
        (bait / "meta.sqlite").write_text("not a database")
    before = tree(tmp_path)
    line = one_line(cli(inst, data, "ask", name, "where is the timeout set?"), repr(name))
    assert "letters, digits" in line
    assert tree(tmp_path) == before


def test_the_layout_refuses_every_name_that_is_not_one_path_component(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    for bad in ("..", ".", "../x", "x/../../y", "/abs", "", "a\\b", "a\0b", "-x"):
        with pytest.raises(ConfigError):
            layout.instance(bad)
    for good in ("widget", "w.2", "a_b-c"):
        assert layout.instance(good).parent == tmp_path
