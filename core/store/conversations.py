"""Chat threads and feedback, in one SQLite file (``Layout.conversations`` by default).

A *thread* is keyed by platform and a platform-specific key (Slack: ``team:channel:thread_ts``,
Discord: the thread's channel id; the API, the web page and MCP (``api``, ``web``, ``mcp``): the
caller and its conversation id). Each answered question is a *turn*; a thread's earlier turns
are the conversation a follow-up is answered with. Feedback (👍/👎) is recorded per turn and user
(a second click replaces the first) and read back with the turn's instance, question, answer and
sources by ``repo-expert feedback NAME``. A turn records ``no_answer`` (the answerer said the
sources don't hold the answer); :meth:`ConversationStore.unanswered` lists those turns and the
ones given a 👎 (``feedback NAME --unanswered``, ``--export-eval``).

The schema evolves by numbered migrations (``PRAGMA user_version`` counts those applied; see
``store/sqlite.py``). Several processes (``serve slack`` and ``serve discord``) may share
the file: it is opened in WAL mode with a busy timeout.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiosqlite

from core.models import Answer, Turn
from core.store.sqlite import Migration, open_db

Verdict = Literal["up", "down"]
MIGRATIONS: list[Migration] = []


def migration(fn: Callable[[sqlite3.Connection], None]) -> Callable[[sqlite3.Connection], None]:
    MIGRATIONS.append(fn)
    return fn


@migration
def m001_turns(db: sqlite3.Connection) -> None:
    db.execute(
        """CREATE TABLE turns (
            id INTEGER PRIMARY KEY,
            platform TEXT NOT NULL,
            thread TEXT NOT NULL,
            instance TEXT NOT NULL,
            user TEXT NOT NULL,
            question TEXT NOT NULL,
            answer TEXT NOT NULL,
            sources TEXT NOT NULL,   -- JSON list of Source.to_json() without the chunk text
            created REAL NOT NULL
        )"""
    )
    db.execute("CREATE INDEX turns_thread ON turns (platform, thread, id)")


@migration
def m002_feedback(db: sqlite3.Connection) -> None:
    db.execute(
        """CREATE TABLE feedback (
            id INTEGER PRIMARY KEY,
            turn_id INTEGER NOT NULL REFERENCES turns (id),
            user TEXT NOT NULL,
            verdict TEXT NOT NULL CHECK (verdict IN ('up', 'down')),
            created REAL NOT NULL,
            UNIQUE (turn_id, user)
        )"""
    )


@migration
def m003_no_answer(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE turns ADD COLUMN no_answer INTEGER NOT NULL DEFAULT 0")


@dataclass
class FeedbackRecord:
    """One person's verdict on one answer, with what was asked and answered."""

    turn_id: int
    platform: str
    thread: str
    instance: str
    question: str
    answer: str
    sources: list[dict[str, Any]]
    user: str
    verdict: Verdict
    created: float

    def to_json(self) -> dict[str, Any]:
        return {
            "turn": self.turn_id, "platform": self.platform, "thread": self.thread,
            "instance": self.instance, "question": self.question, "answer": self.answer,
            "sources": self.sources, "user": self.user, "verdict": self.verdict,
            "created": self.created,
        }  # fmt: skip


@dataclass
class Unanswered:
    """A question that got no answer (``no_answer``) or a 👎 from someone (``down`` counts them)."""

    turn_id: int
    platform: str
    thread: str
    instance: str
    question: str
    answer: str
    sources: list[dict[str, Any]]
    no_answer: bool
    down: int
    created: float

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        return {"turn": d.pop("turn_id"), **d}


# Both stores select the same columns for :meth:`unanswered` (``?`` / ``$n`` differ).
UNANSWERED_SQL = (
    "SELECT t.id, t.platform, t.thread, t.instance, t.question, t.answer, t.sources, "
    "t.no_answer, (SELECT count(*) FROM {feedback} f WHERE f.turn_id = t.id AND "
    "f.verdict = 'down') AS down, t.created FROM {turns} t WHERE t.instance = {p1} "
    "AND (t.no_answer OR EXISTS (SELECT 1 FROM {feedback} f WHERE f.turn_id = t.id "
    "AND f.verdict = 'down')) ORDER BY t.id DESC LIMIT {p2}"
)


def unanswered_row(r: Any) -> Unanswered:
    return Unanswered(int(r[0]), r[1], r[2], r[3], r[4], r[5], json.loads(r[6]), bool(r[7]),
                      int(r[8]), float(r[9]))  # fmt: skip


def source_record(answer: Answer) -> str:
    out = []
    for s in answer.sources:
        d = s.to_json()
        d.pop("text", None)  # the index keeps the text; the record keeps where it points
        for p in d.get("passages", []):
            p.pop("text", None)
        out.append(d)
    return json.dumps(out, ensure_ascii=False)


class ConversationStore:
    """Thread history and feedback. Open with :meth:`open`, close with :meth:`close`."""

    def __init__(self, db: aiosqlite.Connection, path: Path) -> None:
        self._db = db
        self.path = path

    @classmethod
    async def open(cls, path: Path) -> ConversationStore:
        db = await open_db(path, MIGRATIONS, "conversations database", busy_ms=5000)
        try:
            await db.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            await db.close()
            raise
        return cls(db, path)

    async def close(self) -> None:
        await self._db.close()

    async def add_turn(
        self, platform: str, thread: str, instance: str, user: str, question: str, answer: Answer
    ) -> int:
        cur = await self._db.execute(
            "INSERT INTO turns (platform, thread, instance, user, question, answer, sources, "
            "created, no_answer) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (platform, thread, instance, user, question, answer.text, source_record(answer),
             time.time(), int(answer.no_answer)),
        )  # fmt: skip
        await self._db.commit()
        assert cur.lastrowid is not None
        return cur.lastrowid

    async def history(self, platform: str, thread: str, limit: int = 6) -> list[Turn]:
        """The thread's last ``limit`` turns, oldest first."""
        cur = await self._db.execute(
            "SELECT question, answer FROM turns WHERE platform = ? AND thread = ? "
            "ORDER BY id DESC LIMIT ?",
            (platform, thread, limit),
        )
        rows = list(await cur.fetchall())
        return [Turn(question=q, answer=a) for q, a in reversed(rows)]

    async def thread_instance(self, platform: str, thread: str) -> str | None:
        """The instance of the thread's latest turn; None if the bot never answered there."""
        cur = await self._db.execute(
            "SELECT instance FROM turns WHERE platform = ? AND thread = ? ORDER BY id DESC LIMIT 1",
            (platform, thread),
        )
        row = await cur.fetchone()
        return str(row[0]) if row else None

    async def turn_place(self, turn_id: int) -> tuple[str, str, str] | None:
        """(platform, thread, instance) of a turn; None if there is no such turn. A face that
        serves several callers checks with it that a turn is the caller's before recording
        feedback on it."""
        cur = await self._db.execute(
            "SELECT platform, thread, instance FROM turns WHERE id = ?", (turn_id,)
        )
        row = await cur.fetchone()
        return (str(row[0]), str(row[1]), str(row[2])) if row else None

    async def record_feedback(
        self, platform: str, turn_id: int, user: str, verdict: Verdict
    ) -> FeedbackRecord | None:
        """Record (or change) ``user``'s verdict on a turn; None if no such turn on ``platform``."""
        cur = await self._db.execute(
            "SELECT 1 FROM turns WHERE id = ? AND platform = ?", (turn_id, platform)
        )
        if await cur.fetchone() is None:
            return None
        await self._db.execute(
            "INSERT INTO feedback (turn_id, user, verdict, created) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (turn_id, user) DO UPDATE SET verdict = excluded.verdict, "
            "created = excluded.created",
            (turn_id, user, verdict, time.time()),
        )
        await self._db.commit()
        found = await self._feedback("f.turn_id = ? AND f.user = ?", (turn_id, user), 1)
        return found[0]

    async def feedback(self, instance: str, limit: int = 1000) -> list[FeedbackRecord]:
        """Feedback on one instance's answers, newest first."""
        return await self._feedback("t.instance = ?", (instance,), limit)

    async def unanswered(self, instance: str, limit: int = 1000) -> list[Unanswered]:
        """Turns of ``instance`` that got no answer or a 👎, newest first."""
        sql = UNANSWERED_SQL.format(feedback="feedback", turns="turns", p1="?", p2="?")
        cur = await self._db.execute(sql, (instance, limit))
        return [unanswered_row(r) for r in await cur.fetchall()]

    async def _feedback(
        self, where: str, args: tuple[Any, ...], limit: int
    ) -> list[FeedbackRecord]:
        cur = await self._db.execute(
            "SELECT t.id, t.platform, t.thread, t.instance, t.question, t.answer, t.sources, "
            "f.user, f.verdict, f.created FROM feedback f JOIN turns t ON t.id = f.turn_id "
            f"WHERE {where} ORDER BY f.created DESC, f.id DESC LIMIT ?",
            (*args, limit),
        )
        out = []
        for r in await cur.fetchall():
            sources = json.loads(r[6])
            out.append(FeedbackRecord(r[0], r[1], r[2], r[3], r[4], r[5], sources, *r[7:10]))
        return out
