"""Loading instance files and other settings files: ``${VAR}`` expansion, validation, and errors
that name the file, the key path and what was expected (never a secret's value).

A file is read as UTF-8 YAML with limits (:func:`read_yaml`): aliases may not expand the document
past :data:`MAX_YAML_VALUES` values (a 300-byte "billion laughs" file would otherwise take
minutes and gigabytes), and nesting deeper than Python's stack is an error, not a crash."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from core.config.redact import remember
from core.config.repos import repo_problems, scope_problems
from core.config.schema import NAME, NAME_RULE, Instance
from core.errors import ConfigError, InstanceNotFound

_M = TypeVar("_M", bound=BaseModel)

log = logging.getLogger(__name__)

DEFAULT_INSTANCES_DIR = "instances"
DEFAULT_DATA_DIR = ".repo-expert"


MAX_YAML_VALUES = 100_000  # scalars and collections after aliases are expanded

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass
class _Unset:
    """A ``${VAR}`` whose variable is not set: where, and which."""

    loc: tuple[str | int, ...]
    var: str

    @property
    def key(self) -> str:
        return _dotted(self.loc)


def _dotted(loc: tuple[str | int, ...]) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else f".{p}" if out else str(p)
    return out or "(top level)"


def _expand(value: Any, unset: list[_Unset], loc: tuple[str | int, ...] = ()) -> Any:
    """Replace ``${VAR}`` in every string of a loaded YAML tree. An unset variable is recorded
    in ``unset`` and left as written, so the rest of the file is still validated."""
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            var, default = m.group(1), m.group(2)
            if var in os.environ:
                return os.environ[var]
            if default is not None:
                return default
            unset.append(_Unset(loc, var))
            return m.group(0)

        return _VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand(v, unset, (*loc, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, unset, (*loc, i)) for i, v in enumerate(value)]
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


def _problems(err: ValidationError | None, unset: list[_Unset]) -> list[str]:
    """One line per problem: every unset variable, and every validation error except those of
    a value that still holds an unset ``${VAR}`` (its real value is unknown)."""
    lines = [f"  {u.key}: environment variable {u.var} is not set (referenced as ${{{u.var}}}; "
             f"or write ${{{u.var}:-default}})" for u in unset]  # fmt: skip
    for e in err.errors() if err is not None else []:
        loc = tuple(e["loc"])
        if any(loc[: len(u.loc)] == u.loc for u in unset):
            continue
        key = _dotted(loc)
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
            and not any(w in key for w in ("api_key", "token", "secret"))  # never echo one
            else ""
        )
        lines.append(f"  {key}: {msg}{extra}")
    return lines


def _read_yaml(file: Path, what: str) -> dict[str, Any]:
    raw = read_yaml(file)
    if raw is None and what != "instance":
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: expected a mapping of settings at the top level")
    return raw


def _validate(file: Path, raw: dict[str, Any], model: type[_M], what: str) -> _M:
    """``model`` from the file's settings; every problem of the file in one error."""
    unset: list[_Unset] = []
    expanded = _expand(raw, unset)
    try:
        out = model.model_validate(expanded)
    except ValidationError as e:
        raise ConfigError(_report(file, what, _problems(e, unset))) from None
    if unset:
        raise ConfigError(_report(file, what, _problems(None, unset)))
    remember(out)  # its tokens never reach an error line or a log (config/redact.py)
    return out


def _report(file: Path, what: str, problems: list[str]) -> str:
    n = len(problems)
    if n == 1:  # one problem: one line
        return f"{file}: invalid {what}: {problems[0].strip()}"
    return f"{file}: invalid {what} ({n} problem{'s' if n != 1 else ''})\n" + "\n".join(problems)


def load_instance(file: Path) -> Instance:
    """Load and validate one instance file; one error lists all its problems, each with the
    key and what was expected."""
    inst = _validate(file, _read_yaml(file, "instance"), Instance, "instance configuration")
    inst.source_file = file.resolve()
    problems = repo_problems(inst) + scope_problems(inst)
    if problems:
        raise ConfigError(_report(file, "instance configuration", problems))
    if not inst.name:
        if not NAME.fullmatch(file.stem):  # the name becomes a folder under the data folder
            raise ConfigError(
                f"{file}: the file name gives the instance name {file.stem!r}: {NAME_RULE}; "
                "rename the file or set `name:`"
            )
        inst.name = file.stem
    r = inst.retrieval
    for key in ("ranker_file", "kinds_file"):
        rel = getattr(r, key)
        if rel is not None:  # relative to the instance file, like every path of the file
            path = inst.resolve(str(rel))
            if not path.is_file():
                raise ConfigError(f"{file}: retrieval.{key}: no such file: {path} (expected a "
                                  "JSON written by benchmarks/train_ranker.py)")  # fmt: skip
            setattr(r, key, path)
    return inst


def load_settings_file(file: Path, model: type[_M]) -> _M:
    """Load another YAML settings file (e.g. the chat bots' serve file) into ``model``, with the
    same ``${VAR}`` expansion and error messages as an instance file."""
    return _validate(file, _read_yaml(file, "settings"), model, "settings")


@dataclass
class Settings:
    """Where instances and data live (flags > environment > defaults). The data folder defaults
    to ``.repo-expert`` inside the instances folder — not the current directory — so every
    command run on the same instances finds the same index wherever it is run from. ``store``:
    the deployment's store — None or "local" for the files under the data folder, or a
    postgresql:// URL shared by every process (``core/store/open.py``)."""

    instances_dir: Path
    data_dir: Path
    store: str | None = None

    @classmethod
    def from_env(
        cls, instances: str | None = None, data: str | None = None, store: str | None = None
    ) -> Settings:
        folder = Path(instances or os.environ.get("REPO_EXPERT_INSTANCES") or DEFAULT_INSTANCES_DIR)
        where = data or os.environ.get("REPO_EXPERT_DATA")
        store = store or os.environ.get("REPO_EXPERT_STORE") or None
        if where:
            return cls(instances_dir=folder, data_dir=Path(where), store=store)
        default = folder.absolute() / DEFAULT_DATA_DIR
        legacy = Path.cwd() / DEFAULT_DATA_DIR  # the earlier default: in the current directory
        if not default.exists() and legacy.is_dir() and legacy != default:
            log.warning(
                "using the data folder %s of an earlier version (index, conversations); the "
                "default is now %s: move it there, or pass --data", legacy, default
            )  # fmt: skip
            default = legacy
        return cls(instances_dir=folder, data_dir=default, store=store)


def instance_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise ConfigError(f"{directory}: instances directory not found")
    return sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def load_all(directory: Path) -> dict[str, Instance]:
    """Load every instance; one error lists the problems of every invalid file (and any name
    defined twice)."""
    out: dict[str, Instance] = {}
    problems: list[str] = []
    for f in instance_files(directory):
        try:
            inst = load_instance(f)
        except ConfigError as e:
            problems.append(str(e))
            continue
        if inst.name in out:
            other = out[inst.name].source_file
            problems.append(f"{f}: name: instance '{inst.name}' is already defined in {other}")
            continue
        out[inst.name] = inst
    if problems:
        raise ConfigError("\n".join(problems))
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
