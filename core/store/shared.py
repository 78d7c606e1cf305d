"""What a deployment stores besides the index, as protocols the local files and the PostgreSQL
twins both implement: an instance's :class:`State` (issues mirror, ETags, marks, last sync and
error — ``state.py`` / ``postgres/state.py``) and the bots' :class:`Conversations` (threads and
feedback — ``conversations.py`` / ``postgres/conversations.py``). ``open.py`` picks the pair of a
deployment with its index store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

from core.layout import Layout
from core.models import Answer, Turn
from core.store.conversations import FeedbackRecord, Unanswered, Verdict
from core.store.state import IssueRow, StateDB


class State(Protocol):
    """One instance's state; every call is committed when it returns."""

    async def get(self, key: str, default: Any = None) -> Any: ...
    async def put(self, **values: Any) -> None: ...
    async def etag(self, url: str) -> str | None: ...
    async def set_etag(self, url: str, etag: str | None) -> None: ...
    async def store_issues(self, rows: Iterable[IssueRow], marks: dict[str, Any]) -> int: ...
    async def mark_stale(self, numbers: Iterable[int]) -> int: ...
    async def store_comments(
        self, number: int, comments: list[dict[str, Any]], for_updated_at: str,
        files: list[str] | None = None,
    ) -> None: ...  # fmt: skip
    async def delete(self, numbers: Iterable[int]) -> int: ...
    async def rows(self) -> list[IssueRow]: ...
    async def pending(self) -> list[IssueRow]: ...
    async def numbers(self) -> set[int]: ...
    async def counts(self) -> dict[str, int]: ...


# ``async with opener(name) as db``: an instance's state, closed after the block.
StateOpener = Callable[[str], AbstractAsyncContextManager[State]]


def local_state(layout: Layout) -> StateOpener:
    """The state files under the data folder (``{data}/{instance}/state.sqlite``)."""

    @asynccontextmanager
    async def open_state(instance: str) -> AsyncIterator[StateDB]:
        async with await StateDB.open(layout.state(instance)) as db:
            yield db

    return open_state


def state_of(layout: Layout, state: StateOpener | None) -> StateOpener:
    """The opener to use: the one given (a shared database), else the local files."""
    return state or local_state(layout)


class Conversations(Protocol):
    """Thread history and feedback (``store/conversations.py`` documents the methods)."""

    async def add_turn(
        self, platform: str, thread: str, instance: str, user: str, question: str, answer: Answer
    ) -> int: ...
    async def history(self, platform: str, thread: str, limit: int = 6) -> list[Turn]: ...
    async def thread_instance(self, platform: str, thread: str) -> str | None: ...
    async def turn_place(self, turn_id: int) -> tuple[str, str, str] | None: ...
    async def record_feedback(
        self, platform: str, turn_id: int, user: str, verdict: Verdict
    ) -> FeedbackRecord | None: ...
    async def feedback(self, instance: str, limit: int = 1000) -> list[FeedbackRecord]: ...
    async def unanswered(self, instance: str, limit: int = 1000) -> list[Unanswered]: ...
    async def close(self) -> None: ...
