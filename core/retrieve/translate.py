"""Machine translation of a non-English question into the corpus's language, for the lexical
channel.

The embedder is multilingual, BM25 is not: "¿cómo decide Thor el ancho del terminal?" shares
no word with ``terminal_width`` or "width" but ``terminal``, and the glossary (``glossary.py``)
knows only the software words someone wrote down. ``search.candidates`` adds the terms of the
question's translation that some document of the build holds (a word the corpus never uses
cannot match, and would only move the embedded text: httpx's "almacén" → *warehouse*) to the
glossary's — the lexical query, the embedded question and the ranker's term matches. A question
read as a bug report is searched as asked: its error text and identifiers already match, and
translated, Spanish bug reports lost (0.843 → 0.809). On the dev sets' tuning halves (leave one
set out, ``benchmarks/results/devsets/variants/prompts-2026-12-04/PLAN-s33.md``): all 0.817 →
0.823, Spanish questions' MRR 0.817 → 0.836 (hit 0.948 → 0.970), English unchanged; on the
seven sets the shipped ranker never saw (cited), Spanish questions 0.764 → 0.810.

The translator is `Apertium <https://apertium.org>`_, a rule-based, offline machine translation
system packaged by Debian and Ubuntu (``apt-get install apertium apertium-eng-spa``), run as a
program (GPL; nothing of it is linked or shipped here). It is optional: without it, or without
the pair for a question's language, :meth:`Apertium.translate` returns None and the glossary
works alone. One translation is one short-lived process (~0.1 s: the transducers load each time;
Apertium's null-flush mode did not flush through its bilingual lookup here, so no process is
kept). Translations are cached by text; a failure or a timeout is logged once and counts as no
translation, never as an error of the question.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
from collections import OrderedDict
from typing import Protocol

log = logging.getLogger(__name__)

# ISO 639-1 (what language.detect_language returns) -> ISO 639-3 (what Apertium's newer pairs are
# named by: spa-eng); older pairs use the two-letter codes (es-en), tried too.
ISO3 = {
    "en": "eng", "es": "spa", "fr": "fra", "de": "deu", "pt": "por", "it": "ita", "ca": "cat",
    "gl": "glg", "nl": "nld", "ro": "ron", "eu": "eus", "oc": "oci", "eo": "epo", "sv": "swe",
    "da": "dan", "no": "nob", "pl": "pol", "ru": "rus", "uk": "ukr", "cs": "ces", "tr": "tur",
    "id": "ind", "ar": "ara", "fa": "fas", "hi": "hin", "bg": "bul", "el": "ell", "he": "heb",
    "fi": "fin", "hu": "hun", "vi": "vie",
}  # fmt: skip
# Apertium's marks: * unknown word (with -u: none), # a form it could not generate, @ a word the
# bilingual dictionary lacks. The words stay; the marks go.
_MARKS = re.compile(r"[*#@]")


class Translator(Protocol):
    async def translate(self, text: str, source: str, target: str) -> str | None:
        """``text`` (in ``source``, ISO 639-1) in ``target``; None when it cannot be had."""
        ...


class Apertium:
    """Translations by the ``apertium`` program, for the directions it has installed."""

    def __init__(
        self, program: str = "apertium", timeout: float = 5.0, cache_size: int = 1024,
        concurrency: int = 4,
    ) -> None:  # fmt: skip
        self.program = program
        self.timeout = timeout
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[str, str], str | None] = OrderedDict()
        self._directions: frozenset[str] | None = None
        self._gate = asyncio.Semaphore(concurrency)
        self._warned: set[str] = set()

    def _list(self) -> frozenset[str]:
        path = shutil.which(self.program)
        if path is None:
            return frozenset()
        try:
            out = subprocess.run([path, "-l"], capture_output=True, timeout=self.timeout,
                                 check=False).stdout  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as e:
            self._warn("list", "apertium -l failed (%s): questions are not translated", e)
            return frozenset()
        return frozenset(line.strip() for line in out.decode(errors="replace").splitlines()
                         if line.strip())  # fmt: skip

    async def directions(self) -> frozenset[str]:
        """The installed translation directions (``spa-eng`` …), read once; none without the
        program."""
        if self._directions is None:
            self._directions = await asyncio.to_thread(self._list)
        return self._directions

    async def direction(self, source: str, target: str) -> str | None:
        have = await self.directions()
        for d in (f"{ISO3.get(source, source)}-{ISO3.get(target, target)}", f"{source}-{target}"):
            if d in have:
                return d
        return None

    async def translate(self, text: str, source: str, target: str) -> str | None:
        if source == target or not text.strip():
            return None
        d = await self.direction(source, target)
        if d is None:
            return None
        key = (d, text)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        async with self._gate:
            out = await self._run(d, text)
        self._cache[key] = out
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return out

    async def _run(self, direction: str, text: str) -> str | None:
        # One line in, one line out (-f line: no sentence splitting of the question's lines).
        data = " ".join(text.split()).encode()
        try:
            proc = await asyncio.create_subprocess_exec(
                self.program, "-u", "-f", "line", direction, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group: a timeout ends the pipeline
            )  # fmt: skip
        except OSError as e:
            self._warn(direction, "apertium %s could not start (%s)", direction, e)
            return None
        try:
            out, err = await asyncio.wait_for(proc.communicate(data), self.timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # apertium is a shell pipeline: all of it
            await proc.wait()
            self._warn(direction, "apertium %s took over %.1fs: not translated", direction,
                       self.timeout)  # fmt: skip
            return None
        if proc.returncode != 0:
            self._warn(direction, "apertium %s failed (exit %s): %s", direction, proc.returncode,
                       err.decode(errors="replace").strip()[:200])  # fmt: skip
            return None
        return " ".join(_MARKS.sub("", out.decode(errors="replace")).split()) or None

    def _warn(self, key: str, msg: str, *args: object) -> None:
        if key not in self._warned:  # once per direction: a broken install is not news per question
            self._warned.add(key)
            log.warning(msg, *args)
