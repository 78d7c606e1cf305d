"""What the HTTP API, the web page and the MCP server share: who is calling, which instances
exist for them, and the service calls with their limits and the conversations store.

* :func:`authenticate` — an API key (``Authorization: Bearer KEY``, matched by its hash) or,
  when no key is configured, a direct call from 127.0.0.1 → a :class:`Caller`.
* :class:`Gateway` — ``instances`` / ``search`` / ``ask`` / ``feedback`` / ``read_source`` for a
  caller. An instance the caller may not use does not exist for it: the same "no such instance"
  as a name nobody configured. Answers are recorded as turns (platform ``api``, ``web`` or
  ``mcp``; the thread is the caller's name and its conversation id), so follow-ups carry the
  conversation and ``repo-expert feedback`` shows the 👍/👎 given here.
* :class:`Rejected` — a refusal with a code and one line; each face renders it (a JSON error, an
  MCP tool error). A :class:`~core.errors.RepoExpertError` is mapped by :func:`error_of`.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from core.config import Instance, match_key, names_allow
from core.errors import (
    BadQuestion,
    EmbeddingError,
    IndexError_,
    InstanceNotFound,
    LLMError,
    NotAllowed,
    PathNotAllowed,
    RepoExpertError,
    SourceError,
    StoreError,
)
from core.models import COLLECTIONS, Collection
from core.ops.health import Probe
from core.ops.metrics import Metrics
from core.service import Conversations, OnText, RepoExpert, says_repo
from core.store.conversations import Verdict

from .common import Limits, Refusal, Slot
from .settings import ServeConfig

log = logging.getLogger(__name__)

Platform = Literal["api", "web", "mcp"]
PLATFORMS: tuple[Platform, ...] = ("api", "web", "mcp")
CONVERSATION = re.compile(r"^[A-Za-z0-9_-]{8,64}$")


class Rejected(Exception):
    """A request refused on purpose: ``code`` (machine-readable), ``status`` (HTTP), one line."""

    def __init__(self, code: str, status: int, line: str) -> None:
        super().__init__(line)
        self.code, self.status, self.line = code, status, line


def no_such_instance(name: str) -> Rejected:
    return Rejected("not_found", 404, f"no instance named {name!r}")


# Status and code of each deliberate error, by type (the nearest listed ancestor wins); the line
# shown is the error's user_line — except PathNotAllowed, whose message describes only the
# caller's own path.
_ERRORS: list[tuple[type[RepoExpertError], int, str]] = [
    (InstanceNotFound, 404, "not_found"),
    (NotAllowed, 404, "not_found"),
    (PathNotAllowed, 400, "path_not_allowed"),
    (BadQuestion, 400, "bad_request"),
    (IndexError_, 503, "index_unavailable"),
    (StoreError, 503, "store_unavailable"),
    (EmbeddingError, 503, "embedding_failed"),
    (LLMError, 502, "model_failed"),
    (SourceError, 502, "source_unavailable"),
]


def error_of(exc: BaseException) -> Rejected:
    """The refusal a face shows for an error (details go to the log, by the caller)."""
    if isinstance(exc, Rejected):
        return exc
    for cls, status, code in _ERRORS:
        if isinstance(exc, cls):
            line = str(exc) if cls in (PathNotAllowed, BadQuestion) else exc.user_line
            return Rejected(code, status, line)
    if isinstance(exc, RepoExpertError):
        return Rejected("error", 500, exc.user_line)
    return Rejected("internal", 500, RepoExpertError.user_line)


@dataclass(frozen=True)
class Caller:
    """Who is calling: an API key's name, ``local`` (127.0.0.1 without keys) or ``stdio`` (the
    MCP client that started us); ``names``: the instances it may use (``"*"``: the public ones)."""

    name: str
    names: tuple[str, ...]

    def allows(self, inst: Instance) -> bool:
        return names_allow(list(self.names), inst.name, inst.access.private)


def _loopback(peer: str | None) -> bool:
    try:
        return peer is not None and ipaddress.ip_address(peer.split("%")[0]).is_loopback
    except ValueError:
        return False


PROXY_HEADERS = ("x-forwarded-for", "forwarded", "x-real-ip")
LOCAL_NAMES = {"127.0.0.1", "localhost", "::1"}


def _host_name(netloc: str) -> str:
    return urlsplit("//" + netloc).hostname or ""


def authenticate(config: ServeConfig, headers: Mapping[str, str], peer: str | None) -> Caller:
    """The caller of an HTTP request (``headers`` with lower-case names), or :class:`Rejected`:
    401 without a valid key; when no key is configured, 403 unless the call comes straight from
    127.0.0.1 (no proxy header), names a loopback host (no DNS rebinding) and, from a browser,
    comes from a page of this same server (no cross-site request). Never logs the key."""
    keys = config.api.keys
    if not keys:
        host = headers.get("host", "")
        origin = headers.get("origin")
        local = (
            _loopback(peer)
            and not any(h in headers for h in PROXY_HEADERS)
            and _host_name(host) in LOCAL_NAMES
            and (origin is None or urlsplit(origin).netloc == host)
        )
        if local:
            return Caller("local", ("*",))
        raise Rejected(
            "forbidden", 403, "no API key is configured, so only 127.0.0.1 may call (directly, "
            "not through a proxy or from another site); add api.keys to the settings file"
        )  # fmt: skip
    scheme, _, token = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Rejected("unauthorized", 401, "send an API key: Authorization: Bearer KEY")
    key = match_key(keys, token.strip())
    if key is None:
        raise Rejected("unauthorized", 401, "the API key is not valid")
    return Caller(key.name, tuple(key.instances))


class Gateway:
    """The service as the API, the page and MCP see it (one per process)."""

    def __init__(
        self,
        app: RepoExpert,
        store: Conversations,
        config: ServeConfig,
        instances: Mapping[str, Instance],
        metrics: Metrics | None = None,
    ) -> None:
        self.app, self.store, self.config = app, store, config
        self.instances = dict(instances)
        self.metrics = metrics or Metrics()
        self.probe = Probe(app, sorted(self.instances), self.metrics)
        self.probe.check("conversations store", lambda: store.thread_instance("health", "-"))
        self.limits = Limits(config.rate_limit, config.rate_window, config.max_concurrent)

    # -- what exists for a caller ------------------------------------------------------------
    def visible(self, caller: Caller) -> list[str]:
        return [n for n, i in sorted(self.instances.items()) if caller.allows(i)]

    def instance(self, caller: Caller, name: Any) -> str:
        inst = self.instances.get(name) if isinstance(name, str) else None
        if inst is None or not caller.allows(inst):
            raise no_such_instance(str(name)[:100])
        return inst.name

    async def list_instances(self, caller: Caller) -> list[dict[str, Any]]:
        return [await self.app.describe(n) for n in self.visible(caller)]

    # -- checks ------------------------------------------------------------------------------
    def text(self, value: Any, what: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise Rejected("bad_request", 400, f"{what} must be a non-empty string")
        limit = self.config.api.max_question_chars
        if len(value) > limit:
            raise Rejected("too_long", 413, f"{what} is longer than {limit} characters")
        return value.strip()

    def repo(self, value: Any) -> str | None:
        if value is not None and not isinstance(value, str):
            raise Rejected("bad_request", 400, "repo must be a repository or scope name")
        return value

    def k(self, value: Any) -> int | None:
        if value is None:
            return None
        most = self.config.api.max_k
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
            raise Rejected("bad_request", 400, f"k must be a whole number from 1 to {most}")
        return value

    def admit(self, caller: Caller) -> Slot | None:
        """A slot for one answer (released by the caller), or 429. Over stdio the one client is
        the agent that started this process: limiting it would protect no one."""
        if caller.name == "stdio":
            return None
        slot = self.limits.admit(caller.name)
        if isinstance(slot, Refusal):
            raise Rejected("rate_limited", 429, slot.message)
        return slot

    # -- the calls ---------------------------------------------------------------------------
    async def search(
        self, caller: Caller, name: Any, query: Any, k: Any = None, collection: Any = None,
        repo: Any = None,
    ) -> dict[str, Any]:  # fmt: skip
        inst = self.instance(caller, name)
        q, n = self.text(query, "query"), self.k(k)
        if collection is not None and collection not in COLLECTIONS:
            one_of = ", ".join(COLLECTIONS)
            raise Rejected("bad_request", 400, f"collection must be one of {one_of}")
        coll: Collection | None = collection
        found = await self.app.search(inst, q, k=n, collection=coll, repo=self.repo(repo))
        out: dict[str, Any] = {"instance": inst, "query": q, "commit": found.commit,
                               "sources": [s.to_json() for s in found.sources]}  # fmt: skip
        if "narrowed" in found.route:  # the repository the query names, searched alone
            out["narrowed"] = {k: found.route["narrowed"][k] for k in ("repo", "why")}
        return out

    async def ask(
        self,
        caller: Caller,
        platform: Platform,
        name: Any,
        question: Any,
        conversation: Any = None,
        on_text: OnText | None = None,
        repo: Any = None,
        default_repo: Any = None,
    ) -> dict[str, Any]:
        """The answer as ``ask --json`` prints it, with ``conversation`` (pass it back to follow
        up) and ``turn`` (to give feedback on); ``repo``: only this repository's or scope's
        sources (an instance over several); ``default_repo``: the same, as a chat channel's
        default (the web page's *Search in*) — unless the question says ``repo:NAME`` itself,
        or follows up a turn that did (``repo`` wins over it)."""
        inst = self.instance(caller, name)
        q = self.text(question, "question")
        kept = self.repo(repo)
        default = self.repo(default_repo)
        if conversation is None:
            conversation = secrets.token_urlsafe(12)
        elif not isinstance(conversation, str) or not CONVERSATION.match(conversation):
            raise Rejected("bad_request", 400, "conversation must be the id a previous answer "
                           "returned (8-64 letters, digits, '-' or '_')")  # fmt: skip
        thread = f"{caller.name}/{conversation}"
        slot = self.admit(caller)
        self.metrics.in_progress.inc()
        t = time.perf_counter()
        try:
            n = self.config.history_turns
            history = await self.store.history(platform, thread, n) if n else []
            if kept is None and not says_repo(q, history):  # a default, as a channel's
                kept = default
            answer = await self.app.ask(inst, q, conversation=history or None, on_text=on_text,
                                        repo=kept)  # fmt: skip
            turn = await self.store.add_turn(platform, thread, inst, caller.name, q, answer)
        except Exception as e:
            self.metrics.failed(platform, e)
            raise
        finally:
            self.metrics.in_progress.dec()
            if slot is not None:
                slot.release()
        self.metrics.answered(platform, time.perf_counter() - t, answer.no_answer)
        log.info("%s answered %s for %s (%d sources, %.0f ms)", platform, inst, caller.name,
                 len(answer.sources), answer.timings_ms.get("total", 0.0))  # fmt: skip
        return {**answer.to_json(), "instance": inst, "conversation": conversation, "turn": turn}

    async def feedback(self, caller: Caller, turn: Any, verdict: Any) -> dict[str, Any]:
        if verdict not in ("up", "down"):
            raise Rejected("bad_request", 400, "verdict must be 'up' or 'down'")
        if not isinstance(turn, int) or isinstance(turn, bool):
            raise Rejected("bad_request", 400, "turn must be the number an answer returned")
        place = await self.store.turn_place(turn)
        mine = place is not None and place[0] in PLATFORMS and place[1].startswith(
            f"{caller.name}/"
        ) and place[2] in self.instances and caller.allows(self.instances[place[2]])  # fmt: skip
        if place is None or not mine:
            raise Rejected("not_found", 404, f"no answer numbered {turn} was given to you")
        v: Verdict = verdict
        await self.store.record_feedback(place[0], turn, caller.name, v)
        self.metrics.feedback.labels(v).inc()
        return {"turn": turn, "verdict": v}

    async def read_source(
        self, caller: Caller, name: Any, path: Any, start_line: Any = None, end_line: Any = None
    ) -> dict[str, Any]:
        inst = self.instance(caller, name)
        if not isinstance(path, str):
            raise Rejected("bad_request", 400, "path must be a string")
        for v in (start_line, end_line):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise Rejected("bad_request", 400, "start_line and end_line are line numbers ≥ 1")
        lines = await self.app.read_source(inst, path, start_line, end_line)
        return {"instance": inst, **lines.to_json()}
