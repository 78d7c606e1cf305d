"""Loading instance files and other settings files: ``${VAR}`` expansion, validation, and errors
that name the file, the key path and what was expected (never a secret's value).

A file is read as UTF-8 YAML with limits (:func:`read_yaml`): aliases may not expand the document
past :data:`MAX_YAML_VALUES` values (a 300-byte "billion laughs" file would otherwise take
minutes and gigabytes), and nesting deeper than Python's stack is an error, not a crash."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from core.config.redact import remember
from core.config.schema import NAME, NAME_RULE, Instance
from core.errors import ConfigError, InstanceNotFound

DEFAULT_INSTANCES_DIR = "instances"
DEFAULT_DATA_DIR = ".repo-expert"


MAX_YAML_VALUES = 100_000  # scalars and collections after aliases are expanded

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand(value: Any, file: Path, loc: str) -> Any:
    """Replace ``${VAR}`` in every string of a loaded YAML tree."""
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            var, default = m.group(1), m.group(2)
            if var in os.environ:
                return os.environ[var]
            if default is not None:
                return default
            raise ConfigError(
                f"{file}: {loc or '(top level)'}: environment variable {var} is not set "
                f"(referenced as ${{{var}}})"
            )

        return _VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand(v, file, f"{loc}.{k}" if loc else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, file, f"{loc}[{i}]") for i, v in enumerate(value)]
    return value


def read_yaml(file: Path) -> Any:
    """The YAML document of ``file`` (safe types only), within the limits above; every problem
    is one ConfigError line naming the file."""
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{file}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except OSError as e:
        raise ConfigError(f"{file}: cannot read: {e.strerror}") from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}) > MAX_YAML_VALUES:
            raise ConfigError(
                f"{file}: YAML aliases expand to more than {MAX_YAML_VALUES} values; write the "
                "settings out (anchors and aliases are for a few repeated values)"
            )
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(
            f"{file}: not valid YAML{where}: {' '.join(str(problem).split())}"
        ) from None
    except RecursionError:
        raise ConfigError(f"{file}: not valid YAML: nested too deeply") from None
    finally:
        loader.dispose()


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """How many values ``node`` stands for once every alias is expanded (each node's size is
    computed once, so this is linear in the file, not in the expansion)."""
    done = memo.get(id(node))
    if done is not None:
        return done
    memo[id(node)] = 1  # a recursive alias counts once (it cannot be constructed anyway)
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(n, memo) for n in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    memo[id(node)] = size = min(size, MAX_YAML_VALUES + 1)
    return size


def _format_validation(file: Path, err: ValidationError, what: str = "instance ") -> str:
    """``{file}: {key}: {what was expected}`` — one line per problem (the file on the first)."""
    lines = [f"{file}: invalid {what}configuration"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; see the configuration reference in README)"
        elif e["type"] == "missing":
            msg = "required key is missing"
        elif e["type"] == "value_error":
            msg = msg.removeprefix("Value error, ")
        got = e.get("input")
        extra = (
            f" (got {got!r})"
            if e["type"] not in ("missing", "extra_forbidden")
            and not isinstance(got, dict)
            and not any(w in loc for w in ("api_key", "token", "secret"))  # never echo one
            else ""
        )
        lines.append(f"  {loc}: {msg}{extra}")
    if len(lines) == 2:  # one problem: one line
        return f"{file}: {lines[1].strip()}"
    return "\n".join(lines)


def load_instance(file: Path) -> Instance:
    """Load and validate one instance file; errors name the file and the key."""
    raw = read_yaml(file)
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: expected a mapping of settings at the top level")
    raw = _expand(raw, file, "")
    try:
        inst = Instance.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(_format_validation(file, e)) from None
    remember(inst)  # its tokens never reach an error line or a log (config/redact.py)
    inst.source_file = file.resolve()
    if not inst.name:
        if not NAME.fullmatch(file.stem):  # the name becomes a folder under the data folder
            raise ConfigError(
                f"{file}: the file name gives the instance name {file.stem!r}: {NAME_RULE}; "
                "rename the file or set `name:`"
            )
        inst.name = file.stem
    return inst


_M = TypeVar("_M", bound=BaseModel)


def load_settings_file(file: Path, model: type[_M]) -> _M:
    """Load another YAML settings file (e.g. the chat bots' serve file) into ``model``, with the
    same ``${VAR}`` expansion and error messages as an instance file."""
    raw = read_yaml(file) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: expected a mapping of settings at the top level")
    try:
        settings = model.model_validate(_expand(raw, file, ""))
    except ValidationError as e:
        raise ConfigError(_format_validation(file, e, what="")) from None
    remember(settings)
    return settings


@dataclass
class Settings:
    """Where instances and data live (flags > environment > defaults)."""

    instances_dir: Path
    data_dir: Path

    @classmethod
    def from_env(cls, instances: str | None = None, data: str | None = None) -> Settings:
        return cls(
            instances_dir=Path(
                instances or os.environ.get("REPO_EXPERT_INSTANCES") or DEFAULT_INSTANCES_DIR
            ),
            data_dir=Path(data or os.environ.get("REPO_EXPERT_DATA") or DEFAULT_DATA_DIR),
        )


def instance_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise ConfigError(f"{directory}: instances directory not found")
    return sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def load_all(directory: Path) -> dict[str, Instance]:
    """Load every instance; fails on the first invalid file or a duplicated name."""
    out: dict[str, Instance] = {}
    for f in instance_files(directory):
        inst = load_instance(f)
        if inst.name in out:
            other = out[inst.name].source_file
            raise ConfigError(f"{f}: name: instance '{inst.name}' is already defined in {other}")
        out[inst.name] = inst
    return out


def find_instance(directory: Path, name: str) -> Instance:
    if not NAME.fullmatch(name):  # a name from the command line or a request: never a path
        raise InstanceNotFound(f"instance name {name!r}: {NAME_RULE}")
    for f in instance_files(directory):
        if f.stem == name:
            inst = load_instance(f)
            if inst.name == name:
                return inst
    insts = load_all(directory)
    if name in insts:
        return insts[name]
    known = ", ".join(sorted(insts)) or "none"
    raise InstanceNotFound(f"no instance named '{name}' in {directory} (known: {known})")
