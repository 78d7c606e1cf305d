"""Loading instance files and other settings files: ``${VAR}`` expansion, validation, and errors
that name the file, the key path and what was expected (never a secret's value)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from core.config.schema import Instance
from core.errors import ConfigError, InstanceNotFound

DEFAULT_INSTANCES_DIR = "instances"
DEFAULT_DATA_DIR = ".repo-expert"


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


def _format_validation(file: Path, err: ValidationError) -> str:
    lines = [f"{file}: invalid instance configuration"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; see the configuration reference in README)"
        elif e["type"] == "missing":
            msg = "required key is missing"
        got = e.get("input")
        extra = (
            f" (got {got!r})"
            if e["type"] not in ("missing", "extra_forbidden")
            and not isinstance(got, dict)
            and not any(w in loc for w in ("api_key", "token", "secret"))  # never echo one
            else ""
        )
        lines.append(f"  {loc}: {msg}{extra}")
    return "\n".join(lines)


def load_instance(file: Path) -> Instance:
    """Load and validate one instance file; errors name the file and the key."""
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{file}: not valid YAML: {e}") from None
    except OSError as e:
        raise ConfigError(f"{file}: cannot read: {e.strerror}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: expected a mapping of settings at the top level")
    raw = _expand(raw, file, "")
    try:
        inst = Instance.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(_format_validation(file, e)) from None
    inst.source_file = file.resolve()
    if not inst.name:
        inst.name = file.stem
    return inst


_M = TypeVar("_M", bound=BaseModel)


def load_settings_file(file: Path, model: type[_M]) -> _M:
    """Load another YAML settings file (e.g. the chat bots' serve file) into ``model``, with the
    same ``${VAR}`` expansion and error messages as an instance file."""
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, OSError) as e:
        raise ConfigError(f"{file}: cannot read settings: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: expected a mapping of settings at the top level")
    try:
        return model.model_validate(_expand(raw, file, ""))
    except ValidationError as e:
        raise ConfigError(_format_validation(file, e).replace("instance ", "", 1)) from None


@dataclass
class Settings:
    """Where instances and data live (flags > environment > defaults). ``store``: the
    deployment's store — None or "local" for the files under the data folder, or a
    postgresql:// URL shared by every process (``core/store/open.py``)."""

    instances_dir: Path
    data_dir: Path
    store: str | None = None

    @classmethod
    def from_env(
        cls, instances: str | None = None, data: str | None = None, store: str | None = None
    ) -> Settings:
        return cls(
            instances_dir=Path(
                instances or os.environ.get("REPO_EXPERT_INSTANCES") or DEFAULT_INSTANCES_DIR
            ),
            data_dir=Path(data or os.environ.get("REPO_EXPERT_DATA") or DEFAULT_DATA_DIR),
            store=store or os.environ.get("REPO_EXPERT_STORE") or None,
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
