"""The service every face calls (CLI, Slack, Discord, webhooks, eval): :class:`RepoExpert`.

It owns the loaded instances, one embedding service per embedding config, the store of the
deployment (the local store under the data folder by default), and an open reader per instance
that follows the live build, so a re-index swapped in by another process is picked up on the
next question without a restart.

    ask(instance, question)        → Answer      retrieve, then the instance's answerer
    retrieve(instance, question)   → Retrieval   what eval and the baselines score
    search(instance, query)        → Retrieval   the sources alone, numbered (one collection?)
    read_source(instance, path)    → FileLines   an indexed file's lines at the indexed commit
    describe(instance)             → dict        name, description, repository, indexed commit
    sync(instance, SyncRequest)    → SyncReport  gather sources, build, record (index is one)
    status(instance)               → dict        indexed commit, last sync and error
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from core.answer import Answerer, LLMAnswerer, OnText, make_answerer
from core.answer.support import embedding_similarity
from core.config import (
    Instance,
    Settings,
    find_instance,
    is_multi,
    load_all,
    repo_views,
    scopes,
)
from core.embed import EmbedService, embed_service, reading
from core.errors import BadQuestion, ConfigError, IndexError_, PathNotAllowed
from core.index.build import Progress, Summary
from core.index.sync import SyncReport, behind, instance_status, sync_instance
from core.ingest.files import (
    FileLines,
    checkout_root,
    public_address,
    read_indexed,
    safe_path,
)
from core.ingest.gather import SyncRequest
from core.ingest.github import ClientOptions
from core.layout import Layout
from core.models import MAX_QUESTION_CHARS, Answer, Collection, Retrieval, Turn, unit_key
from core.retrieve.followup import resolve_followup
from core.retrieve.kinds import KindModel
from core.retrieve.language import detect_language
from core.retrieve.narrow import narrowed_note, retrieve_named, several_note
from core.retrieve.options import Mode, Options
from core.retrieve.repos import repo_options, says_repo, split_repo, strip_repo
from core.retrieve.translate import Apertium, Translator
from core.store.base import BuildReader, IndexStore
from core.store.open import open_backend
from core.store.shared import Conversations

log = logging.getLogger(__name__)

EmbedderFor = Callable[[Instance], EmbedService]

# What faces use with the service: the service's own types, importable from here.
__all__ = [
    "Conversations", "FileLines", "OnText", "RepoExpert", "SyncReport", "SyncRequest",
    "checked_question", "says_repo",
]  # fmt: skip

# How long a replaced index reader stays open for the questions still running on it.
RETIRE_GRACE_S = 300.0


def checked_question(text: str) -> str:
    """The question as the service reads it (stripped), or :class:`BadQuestion`."""
    q = text.strip()
    if not q:
        raise BadQuestion(
            "the question is empty: ask something about the repository, e.g. "
            "'where is the timeout set?'"
        )
    if len(q) > MAX_QUESTION_CHARS:
        raise BadQuestion(
            f"the question is {len(q):,} characters long; at most {MAX_QUESTION_CHARS:,} are "
            "read: ask it in fewer words (quote only the lines that matter)"
        )
    return q


class RepoExpert:
    def __init__(
        self,
        settings: Settings,
        embedder_for: EmbedderFor | None = None,
        answerer: Answerer | None = None,
        store: IndexStore | None = None,
        translator: Translator | None = None,
    ) -> None:
        self.settings = settings
        # Machine translation of non-English questions (Apertium, where installed).
        self.translator: Translator = translator if translator is not None else Apertium()
        self.layout = Layout(settings.data_dir)
        # The deployment's storage (settings.store: local files, or one shared PostgreSQL).
        self.backend = open_backend(settings.store, self.layout)
        self.store: IndexStore = store or self.backend.index
        self._embedder_for = embedder_for or (
            lambda inst: embed_service(inst.embedding, self.layout)
        )
        # One answerer for every instance when given (tests); else each instance's `llm` config.
        self._owns_embedders = embedder_for is None
        self._owned: set[EmbedService] = set()
        self.answerer = answerer
        self._answerers: dict[str, Answerer] = {}
        self._instances: dict[str, Instance] = {}
        self._readers: dict[str, BuildReader] = {}
        self._open_locks: dict[str, asyncio.Lock] = {}
        self._retired: list[tuple[float, BuildReader]] = []
        self._kinds: dict[tuple[EmbedService, Path | None], KindModel] = {}

    # -- instances ---------------------------------------------------------------------------
    def load_instances(self) -> dict[str, Instance]:
        """Load and validate every instance file (fails on the first bad one)."""
        self._instances = load_all(self.settings.instances_dir)
        return dict(self._instances)

    def instance(self, name: str) -> Instance:
        inst = self._instances.get(name)
        if inst is None:
            inst = find_instance(self.settings.instances_dir, name)
            self._instances[name] = inst
        return inst

    async def preload(self) -> None:
        """Load, before the first question, what it would otherwise wait for: the tuned reader
        of the loaded instances that re-read with it (``retrieval.reader``, about a second). One
        that cannot be loaded is a configuration error here, naming the instance."""
        for name, inst in self._instances.items():
            if inst.retrieval.reader:
                await reading.load(self.embedder(name), name)

    def embedder(self, name: str) -> EmbedService:
        svc = self._embedder_for(self.instance(name))
        if self._owns_embedders:
            self._owned.add(svc)
        return svc

    # -- indexing ----------------------------------------------------------------------------
    async def sync(
        self,
        name: str,
        request: SyncRequest | None = None,
        *,
        progress: Progress | None = None,
        options: ClientOptions | None = None,
    ) -> SyncReport:
        """One update of the index: gather the sources as ``request`` says (default: fetch the
        repository and the GitHub issues), build incrementally, record the outcome (see
        ``core/index/sync.py``). One build or sync per instance at a time, across processes
        too; readers never wait: they keep using the live build."""
        inst = self.instance(name)
        async with self.store.lock(name):
            return await sync_instance(
                inst, self.layout, self.store, self.embedder(name), request or SyncRequest(),
                progress, options, self.backend.state,
            )  # fmt: skip

    async def enqueue(self, name: str, request: SyncRequest | None = None) -> int:
        """Queue a sync for ``repo-expert worker`` (a shared store only): the job id. A queued
        job of the same instance absorbs the request (``SyncRequest.merge``)."""
        self.instance(name)  # an unknown name fails here
        if self.backend.jobs is None:
            raise ConfigError(
                "a job queue needs a shared store: set --store postgresql://… or REPO_EXPERT_STORE"
            )
        return int(await self.backend.jobs.enqueue(name, request or SyncRequest()))

    async def conversations(self, path: Path) -> Conversations:
        """The bots' threads and feedback: the SQLite file at ``path`` (local), or the shared
        database's tables (then ``path`` is not used). The caller closes it."""
        return await self.backend.conversations(path)

    async def index(
        self, name: str, progress: Progress | None = None, full: bool = False
    ) -> Summary:
        """Build or update the index (a sync that fetches everything): its summary."""
        report = await self.sync(name, SyncRequest(full=full), progress=progress)
        assert report.summary is not None  # a sync without a build raised
        for e in report.errors:  # what the build went on without; `status` shows it too
            log.warning("index of %s: %s", name, e)
        return report.summary

    async def status(self, name: str) -> dict[str, Any]:
        """Indexed commit, chunk counts, last sync and error, issues high-water mark."""
        return await instance_status(
            self.instance(name), self.layout, self.store, self.backend.state
        )

    async def behind(self, name: str) -> list[str]:
        """Local repositories whose commit moved since the live build (``sync.behind``)."""
        return await behind(self.instance(name), self.layout, self.store)

    async def describe(self, name: str) -> dict[str, Any]:
        """What a caller may know of an instance: name, description, the repository's public
        address (web URL, else the clone URL; never a local path or a token), indexed commit."""
        inst = self.instance(name)
        meta = await self.store.live_meta(name)
        address = await asyncio.to_thread(public_address, inst)  # may ask git for the remote
        out = {
            "name": inst.name, "description": inst.description,
            "repository": address,
            "indexed": meta is not None, "commit": (meta or {}).get("commit"),
            "built_at": (meta or {}).get("built_at"),
        }  # fmt: skip
        if is_multi(inst):  # each repository: its name, public address and indexed commit
            built = (meta or {}).get("repos") or {}
            out["repos"] = [
                {"name": v.repo_name, "repository": await asyncio.to_thread(public_address, v),
                 "commit": (built.get(v.repo_name) or {}).get("commit")}
                for v in repo_views(inst)
            ]  # fmt: skip
            if inst.scopes:  # named groups of them: a scope's name filters like a repository's
                named = scopes(inst)
                out["scopes"] = {s: list(named[s.lower()]) for s in inst.scopes}
        return out

    async def has_index(self, name: str) -> bool:
        self.instance(name)  # an unknown or unloadable instance fails here, with its file
        return await self.store.live_id(name) is not None

    async def reader(self, name: str) -> BuildReader:
        """The open reader of the live build, reopened when a new build has been swapped in
        (and built first when there is none).

        The reader it replaces is retired, not closed: questions already running on it finish
        there, and it is closed a grace period later (or by :meth:`close`)."""
        live = await self.store.live_id(name)
        r = self._readers.get(name)
        if r is not None and r.build_id == live:
            return r
        async with self._open_locks.setdefault(name, asyncio.Lock()):
            live = await self.store.live_id(name)
            r = self._readers.get(name)
            if r is not None and r.build_id == live:
                return r  # another task opened it while we waited
            if live is None:
                await self.index(name)
            new = await self.store.open_live(name)
            if new is None:
                raise IndexError_(f"instance '{name}' has no index: run `repo-expert index {name}`")
            await self._check_stamp(name, new)
            self._readers[name] = new
            now = time.monotonic()
            if r is not None:
                self._retired.append((now, r))
            keep = []
            for since, old in self._retired:
                if now - since > RETIRE_GRACE_S:
                    await old.close()
                else:
                    keep.append((since, old))
            self._retired = keep
            return new

    # -- asking ------------------------------------------------------------------------------
    async def retrieve(
        self,
        name: str,
        question: str,
        k: int | None = None,
        weights: dict[Collection, float] | None = None,
        mode: Mode = "full",
        repo: str | None = None,
        asked: str | None = None,
    ) -> Retrieval:
        """``repo``: keep only this repository's sources (an instance over several); a
        ``repo:NAME`` in the question does the same. ``asked``: a follow-up as asked, when
        ``question`` joins it to the turn it follows (``narrow.leader``)."""
        question = checked_question(question)
        inst = self.instance(name)
        opt = repo_options(inst, Options.of(inst.retrieval, k=k, weights=weights, mode=mode),
                           repo)  # fmt: skip
        question, opt = split_repo(question, opt)
        reader = await self.reader(name)
        embedder = self.embedder(name)
        kinds = await self.kinds(embedder, opt.config.kinds_file) if mode == "full" else None
        found = await retrieve_named(reader, embedder, question, opt, kinds=kinds,
                                     translator=self.translator, asked=asked)  # fmt: skip
        found.commit = reader.meta.get("commit")
        return found

    def check_repo(self, name: str, repo: str | None) -> None:
        """:class:`BadQuestion` unless ``repo`` is None or a repository, scope or ``all`` of
        instance ``name`` (checked before an answer starts streaming)."""
        inst = self.instance(name)
        repo_options(inst, Options.of(inst.retrieval), repo)

    async def kinds(self, embedder: EmbedService, classifier: Path | None = None) -> KindModel:
        """The question-kind model of an embedder (its examples embedded once, then cached);
        ``classifier``: ``retrieval.kinds_file``, default the bundled one."""
        key = (embedder, classifier)
        model = self._kinds.get(key)
        if model is None:
            async with self._open_locks.setdefault("\0kinds", asyncio.Lock()):
                model = self._kinds.get(key)
                if model is None:
                    build = KindModel.build(embedder, classifier=classifier) if classifier else (
                        KindModel.build(embedder))  # fmt: skip
                    model = self._kinds[key] = await build
        return model

    async def question_vector(self, name: str, text: str) -> np.ndarray:
        """A question's vector as retrieval searches with it: moved to the corpus's language
        (``retrieval.align_to``, core/retrieve/align.py) — so the answer's quotes are chosen by
        the same measure as its sources."""
        svc, cfg = self.embedder(name), self.instance(name).retrieval
        v = await svc.embed_query(text)
        kinds = await self.kinds(svc, cfg.kinds_file)
        return kinds.aligned(v, detect_language(text), cfg.align_to)

    async def search(
        self, name: str, query: str, k: int | None = None, collection: Collection | None = None,
        repo: str | None = None,
    ) -> Retrieval:  # fmt: skip
        """The sources retrieval finds for ``query``, numbered 1..n in rank order (no answer):
        of one collection when ``collection`` is given, of one repository when ``repo`` is."""
        query = checked_question(query)
        inst = self.instance(name)
        opt = repo_options(inst, Options.of(inst.retrieval, k=k), repo)
        query, opt = split_repo(query, opt)
        if collection is not None:
            opt = dataclasses.replace(opt, collections=(collection,))
        reader = await self.reader(name)
        embedder = self.embedder(name)
        kinds = await self.kinds(embedder, opt.config.kinds_file)
        found = await retrieve_named(reader, embedder, query, opt, kinds=kinds,
                                     translator=self.translator)  # fmt: skip
        found.commit = reader.meta.get("commit")
        if collection is not None:
            found.sources = [s for s in found.sources if s.collection == collection]
        for i, s in enumerate(found.sources, 1):
            s.n = i
        return found

    async def read_source(
        self, name: str, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> FileLines:
        """Lines of an indexed docs or code file, as the live build indexed it, with the
        permalink at its commit. Anything else — a path outside the repository, an excluded,
        ignored or absent file, a symbolic link — is :class:`PathNotAllowed` (see
        ``core/ingest/files.py``)."""
        inst = self.instance(name)
        view, repo = inst, ""
        if is_multi(inst):  # "server:src/app.py": the repository first
            views = {v.repo_name: v for v in repo_views(inst)}
            repo, sep, path = path.partition(":")
            if not sep or repo not in views:
                raise PathNotAllowed(f"instance '{name}' has several repositories: give the path "
                                     f"as REPO:PATH, REPO one of {', '.join(views)}")  # fmt: skip
            view = views[repo]
        rel = safe_path(path)
        reader = await self.reader(name)
        unit = (await reader.units()).get(unit_key(repo, rel))
        if unit is None or unit.collection == "issues":
            raise PathNotAllowed(
                f"{rel} is not an indexed file of '{name}' (absent, excluded, ignored, binary "
                "or a symbolic link)"
            )
        root = checkout_root(view, self.layout)
        commit = reader.meta.get("commit")
        if repo:
            commit = ((reader.meta.get("repos") or {}).get(repo) or {}).get("commit")
        return await asyncio.to_thread(
            read_indexed, view, root, rel, unit.content_hash, commit, unit.collection,
            start_line, end_line,
        )  # fmt: skip

    async def ask(
        self,
        name: str,
        question: str,
        conversation: list[Turn] | None = None,
        on_text: OnText | None = None,
        repo: str | None = None,
        retrieval: Retrieval | None = None,
    ) -> Answer:
        """Answer a question about one instance, with numbered, permalinked sources.

        ``on_text``: where the answerer streams (a language model), awaited with the reply so far
        as it arrives. That is a preview — raw citation markers, nothing checked yet; the answer
        returned is the same as without ``on_text`` and replaces it. Extractive answers don't
        stream: ``on_text`` is never called. ``repo``: only that repository's sources (an
        instance over several; ``repo:NAME`` in the question says the same). ``retrieval``: what
        :meth:`retrieve` already found for this question (a caller that looked before deciding
        to answer: support channels), so it is not searched twice."""
        t = time.perf_counter()
        question = checked_question(question)
        if retrieval is None:
            # A follow-up ("and its default?") is searched together with the turn it follows —
            # resolved once, here; the answerer gets the question as asked, the conversation,
            # and (in the retrieval) what was searched.
            query = resolve_followup(question, conversation)
            asked = question if query != question else None  # a follow-up, as asked
            retrieval = await self.retrieve(name, query, repo=repo, asked=asked)
            if query != question:
                retrieval.route["query"] = query
            if retrieval.query != query:  # ``repo:NAME`` taken out
                question = strip_repo(question)
        elif strip_repo(question) != " ".join(question.split()):  # ``repo:NAME``: the caller's
            question = strip_repo(question)  # search took it out already
        ta = time.perf_counter()
        answer = await self.answerer_for(name).answer(question, retrieval, conversation, on_text)
        if not answer.note:
            alone = (retrieval.route.get("narrowed") or {}).get("repo")
            answer.note = several_note(retrieval.route.get("signals", {}), alone)
        if narrowed := narrowed_note(retrieval.route):
            answer.note = "; ".join(x for x in (answer.note, narrowed) if x)
        answer.commit = retrieval.commit
        answer.timings_ms["answer"] = (time.perf_counter() - ta) * 1000
        answer.timings_ms["total"] = (time.perf_counter() - t) * 1000
        return answer

    def answerer_for(self, name: str) -> Answerer:
        """The instance's answerer: extractive, or the model its ``llm`` settings name."""
        if self.answerer is not None:
            return self.answerer
        a = self._answerers.get(name)
        if a is None:
            inst = self.instance(name)
            svc = self.embedder(name)
            sim = embedding_similarity(partial(self.question_vector, name), svc.embed_passages)
            a = self._answerers[name] = make_answerer(inst.llm, inst.name, sim)
        return a

    async def _check_stamp(self, name: str, reader: BuildReader) -> None:
        """Refuse to search vectors of another model: the query would be embedded differently.
        The reader is closed whenever it is not accepted (a mismatch, or a failing embedder)."""
        built = reader.stamp
        try:
            model, dim, _ = await self.embedder(name).info()
        except BaseException:
            await reader.close()
            raise
        if built.get("schema") != self.store.schema:
            await reader.close()
            raise IndexError_(
                f"the index of '{name}' was built by another version of repo-expert (store "
                f"format {built.get('schema')}, this one reads {self.store.schema}): run "
                f"`repo-expert index {name}` to rebuild it"
            )
        if built.get("embedder") != model or built.get("dim") != dim:
            await reader.close()
            raise IndexError_(
                f"the index of '{name}' was built with {built.get('embedder')} "
                f"({built.get('dim')} d) but the instance now embeds with {model} ({dim} d): "
                f"run `repo-expert index {name}` to rebuild it"
            )

    async def close(self) -> None:
        for r in [*self._readers.values(), *(old for _, old in self._retired)]:
            await r.close()
        self._readers.clear()
        self._retired.clear()
        for svc in self._owned:  # services this object took from the process registry
            svc.close()
        self._owned.clear()
        for a in self._answerers.values():  # each model's SDK client and its connections
            if isinstance(a, LLMAnswerer):
                await a.model.aclose()
        self._answerers.clear()
        await self.translator.aclose()  # its kept pipelines
        await self.backend.close()

