"""The error tree: drawn once in core/errors.py, every error with a user line, faces map by type."""

from __future__ import annotations

import inspect
import re

from bot import messages
from bot.common import failure_line
from core import errors
from core.errors import (
    EmbeddingError,
    Gone,
    IndexError_,
    ModelFormatError,
    NotAllowed,
    RateLimited,
    RepoExpertError,
    SourceError,
)


def _classes() -> dict[str, type[RepoExpertError]]:
    return {
        n: c
        for n, c in vars(errors).items()
        if inspect.isclass(c) and issubclass(c, RepoExpertError)
    }


def test_the_docstring_draws_the_whole_tree_with_each_parent() -> None:
    doc = errors.__doc__ or ""
    drawn: dict[str, int] = {}  # name -> depth in the drawing
    parents: dict[str, str] = {}
    stack: list[str] = []
    for line in doc.splitlines():
        m = re.match(r"^\s{4}((?:│\s{3}|\s{4})*)(?:[├└]── )?(\w+)\s{2,}\S", line)
        if not m or not m.group(2)[0].isupper():
            continue
        depth = len(m.group(1)) // 4 + (1 if "── " in line else 0)
        name = m.group(2)
        stack = stack[:depth]
        if stack:
            parents[name] = stack[-1]
        stack.append(name)
        drawn[name] = depth
    classes = _classes()
    assert set(drawn) == set(classes)
    for name, cls in classes.items():
        if name != "RepoExpertError":
            assert cls.__bases__[0].__name__ == parents[name], name
        assert cls.__doc__, f"{name} has no docstring"


def test_every_error_has_a_user_line_without_internals() -> None:
    for cls in _classes().values():
        assert cls.user_line and "\n" not in cls.user_line and "{" not in cls.user_line


def test_faces_map_an_error_to_its_line_by_type_not_by_name() -> None:
    # a subclass says what its nearest ancestor says: a rate limit is a source that failed
    assert failure_line(RateLimited("x", 0.0)) == messages.failed(SourceError.user_line)
    assert failure_line(Gone("x")) == messages.failed(SourceError.user_line)
    assert failure_line(ModelFormatError("x")) == messages.failed(EmbeddingError.user_line)
    assert failure_line(IndexError_("x")) == messages.failed("the search index is not available")
    assert failure_line(NotAllowed("x")) == messages.failed(NotAllowed.user_line)
    # not ours: the generic line, nothing of the exception's text
    line = failure_line(ValueError("secret-path /etc/x"))
    assert line == messages.failed(RepoExpertError.user_line) and "secret" not in line


def test_the_specific_message_stays_for_the_operator() -> None:
    e = RateLimited("GitHub API rate limit: resuming needs a wait of 3600s", 123.0)
    assert "3600s" in str(e) and e.reset_at == 123.0 and "3600" not in e.user_line
