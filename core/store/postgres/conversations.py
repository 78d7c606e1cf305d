"""The bots' threads and feedback in PostgreSQL (``rx_turns``, ``rx_feedback``): the same
methods as :class:`core.store.conversations.ConversationStore`, so every bot replica on every
machine reads the threads and the 👍/👎 the others wrote."""

from __future__ import annotations

import json
import time
from typing import Any

import asyncpg

from core.models import Answer, Turn
from core.store.conversations import (
    UNANSWERED_SQL,
    FeedbackRecord,
    Unanswered,
    Verdict,
    source_record,
    unanswered_row,
)
from core.store.postgres.db import Database


class PgConversations:
    """Implements ``core.store.shared.Conversations`` over the deployment's pool."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def _pool(self) -> asyncpg.Pool:
        return await self.db.pool()

    async def close(self) -> None:
        return None  # the pool is the deployment's

    async def add_turn(
        self, platform: str, thread: str, instance: str, user: str, question: str, answer: Answer
    ) -> int:
        pool = await self._pool()
        got = await pool.fetchval(
            'INSERT INTO rx_turns (platform, thread, instance, "user", question, answer, '
            "sources, created, no_answer) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
            "RETURNING id",
            platform, thread, instance, user, question, answer.text, source_record(answer),
            time.time(), answer.no_answer,
        )  # fmt: skip
        return int(got)

    async def history(self, platform: str, thread: str, limit: int = 6) -> list[Turn]:
        pool = await self._pool()
        rows = await pool.fetch(
            "SELECT question, answer FROM rx_turns WHERE platform = $1 AND thread = $2 "
            "ORDER BY id DESC LIMIT $3",
            platform, thread, limit,
        )  # fmt: skip
        return [Turn(question=q, answer=a) for q, a in reversed(rows)]

    async def thread_instance(self, platform: str, thread: str) -> str | None:
        pool = await self._pool()
        got = await pool.fetchval(
            "SELECT instance FROM rx_turns WHERE platform = $1 AND thread = $2 "
            "ORDER BY id DESC LIMIT 1",
            platform, thread,
        )  # fmt: skip
        return str(got) if got is not None else None

    async def turn_place(self, turn_id: int) -> tuple[str, str, str] | None:
        pool = await self._pool()
        row = await pool.fetchrow(
            "SELECT platform, thread, instance FROM rx_turns WHERE id = $1", turn_id
        )
        return (str(row[0]), str(row[1]), str(row[2])) if row else None

    async def record_feedback(
        self, platform: str, turn_id: int, user: str, verdict: Verdict
    ) -> FeedbackRecord | None:
        pool = await self._pool()
        async with pool.acquire() as conn, conn.transaction():
            if not await conn.fetchval(
                "SELECT 1 FROM rx_turns WHERE id = $1 AND platform = $2", turn_id, platform
            ):
                return None
            await conn.execute(
                'INSERT INTO rx_feedback (turn_id, "user", verdict, created) '
                'VALUES ($1, $2, $3, $4) ON CONFLICT (turn_id, "user") DO UPDATE '
                "SET verdict = excluded.verdict, created = excluded.created",
                turn_id, user, verdict, time.time(),
            )  # fmt: skip
        found = await self._feedback('f.turn_id = $1 AND f."user" = $2', (turn_id, user), 1)
        return found[0]

    async def feedback(self, instance: str, limit: int = 1000) -> list[FeedbackRecord]:
        return await self._feedback("t.instance = $1", (instance,), limit)

    async def unanswered(self, instance: str, limit: int = 1000) -> list[Unanswered]:
        pool = await self._pool()
        sql = UNANSWERED_SQL.format(feedback="rx_feedback", turns="rx_turns", p1="$1", p2="$2")
        return [unanswered_row(r) for r in await pool.fetch(sql, instance, limit)]

    async def _feedback(
        self, where: str, args: tuple[Any, ...], limit: int
    ) -> list[FeedbackRecord]:
        pool = await self._pool()
        rows = await pool.fetch(
            "SELECT t.id, t.platform, t.thread, t.instance, t.question, t.answer, t.sources, "
            'f."user", f.verdict, f.created FROM rx_feedback f JOIN rx_turns t ON t.id = f.turn_id '
            f"WHERE {where} ORDER BY f.created DESC, f.id DESC LIMIT ${len(args) + 1}",
            *args, limit,
        )  # fmt: skip
        return [
            FeedbackRecord(int(r[0]), r[1], r[2], r[3], r[4], r[5], json.loads(r[6]), r[7], r[8],
                           float(r[9]))
            for r in rows
        ]  # fmt: skip
