"""Machine translation of a non-English question into the corpus's language, for the lexical
channel (and, optionally, the dense query).

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
seven sets the shipped ranker never saw (cited), Spanish questions 0.764 → 0.810. With
``retrieval.translate_dense`` (off by default) the translation's own vector is the dense query:
it won on the dev sets' tuning halves (Spanish questions 0.821 → 0.830, cited) and lost on
their reporting halves (0.837 → 0.821), so the question's own reading stays the default.

The translator is `Apertium <https://apertium.org>`_, a rule-based, offline machine translation
system packaged by Debian and Ubuntu (``apt-get install apertium apertium-eng-spa``), run as a
program (GPL; nothing of it is linked or shipped here). It is optional: without it, or without
the pair for a question's language, :meth:`Apertium.translate` returns None and the glossary
works alone. Each direction's pipeline (its ``.mode`` file, with ``apertium-wblank-mode -z``)
is kept running in null-flush mode: a question is written in Apertium's stream format (what
``apertium-destxt`` makes of one line: reserved characters escaped, ``~`` in a blank, a blank
at the end, so the last stage flushes) followed by NUL, and its translation is read up to the
NUL — ~3 ms a question, where ``apertium -f line`` as one process per question took ~150 ms
loading the transducers. On the 795 Spanish questions of the dev sets both give the same words
(the one process per question dropped a final full stop). Without the mode file or
``apertium-wblank-mode``, and for good once a kept pipeline fails, each question runs
``apertium -u -f line`` on its own. Translations are cached by text; a failure or a timeout is
logged once and counts as no translation, never as an error of the question.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import select
import shutil
import signal
import subprocess
import threading
import time
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


# Apertium's stream format: these are escaped in text, "[...]" is a blank (formatting passed
# through untranslated), "~" goes into a blank as apertium-destxt puts it (it marks postgeneration).
_RESERVED = re.compile(r"([\[\]\\^$/<>@{}])")
_UNSTREAM = re.compile(rb"\\(.)|[\[\]]", re.S)
# A longer question (a pasted log) goes to a process of its own, whose timeout covers writing it.
KEPT_MAX = 16384


def to_stream(text: str) -> bytes:
    """One line of ``text`` as the kept pipeline reads it: escaped, a closing blank (without
    one the last word waits for more input), NUL (flush)."""
    line = _RESERVED.sub(r"\\\1", " ".join(text.replace("\0", " ").split())).replace("~", "[~]")
    return line.encode() + b"[]\0"


def from_stream(data: bytes) -> str:
    """The pipeline's output as plain text: blanks opened, escapes dropped."""
    return _UNSTREAM.sub(lambda m: m.group(1) or b"", data).decode(errors="replace")


def _clean(text: str) -> str | None:
    return " ".join(_MARKS.sub("", text).split()) or None


class Translator(Protocol):
    async def translate(self, text: str, source: str, target: str) -> str | None:
        """``text`` (in ``source``, ISO 639-1) in ``target``; None when it cannot be had."""
        ...

    async def aclose(self) -> None:
        """Stop what the translator keeps running."""
        ...


class _Pipeline:
    """One direction's Apertium pipeline, running in null-flush mode: one question at a time.
    Plain blocking pipes, used from a worker thread, so that no event loop owns the process (the
    CLI runs one loop per command; a service keeps one)."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()

    def _start(self) -> subprocess.Popen[bytes]:
        if self.proc is not None and self.proc.poll() is None:
            return self.proc
        self.kill()
        # The mode's pipeline names its options $1 (generation: -n, unknown words unmarked, as
        # `apertium -u`) and $2 (tagger: none).
        self.proc = subprocess.Popen(
            ["bash", "-c", self.command, "apertium", "-n", ""], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        return self.proc

    def translate(self, data: bytes, timeout: float) -> str:
        """The translation of ``data`` (``to_stream``'s; blocking); raises OSError, TimeoutError
        or EOFError when the pipeline fails (the caller stops using it)."""
        with self.lock:
            try:
                return from_stream(self._ask(self._start(), data, timeout))
            except (OSError, TimeoutError, EOFError):
                self.kill()
                raise

    @staticmethod
    def _ask(proc: subprocess.Popen[bytes], data: bytes, timeout: float) -> bytes:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(data)  # at most KEPT_MAX bytes: within the pipe's buffer, never stuck
        proc.stdin.flush()
        out, fd = b"", proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while not out.endswith(b"\0"):  # one NUL per question: flushed through every stage
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError(f"the pipeline ended (exit {proc.wait()})")
            out += chunk
        return out[:-1]

    def __del__(self) -> None:  # an Apertium dropped without aclose(): its processes go too
        with contextlib.suppress(Exception):  # (at interpreter exit, modules may be gone)
            self.kill()

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the whole pipeline: its own group
        for f in (proc.stdin, proc.stdout):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        proc.wait()


class Apertium:
    """Translations by the ``apertium`` program, for the directions it has installed."""

    def __init__(
        self, program: str = "apertium", timeout: float = 5.0, cache_size: int = 1024,
        concurrency: int = 4, keep: bool = True,
    ) -> None:  # fmt: skip
        self.program = program
        self.timeout = timeout
        self.cache_size = cache_size
        self.keep = keep  # a kept pipeline per direction; False: one process per question
        self._cache: OrderedDict[tuple[str, str], str | None] = OrderedDict()
        self._directions: frozenset[str] | None = None
        self._gate = asyncio.Semaphore(concurrency)
        self._warned: set[str] = set()
        self._pipelines: dict[str, _Pipeline | None] = {}

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
        done, out = await self._kept(d, text)
        if not done:
            async with self._gate:
                out = await self._run(d, text)
        self._cache[key] = out
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return out

    def _mode_command(self, direction: str) -> str | None:
        """The direction's pipeline with null flush on every stage, from its ``.mode`` file
        (where ``apertium`` looks: $APERTIUM_DATADIR, else ``share/apertium`` beside the
        program's ``bin``); None where that cannot be had."""
        program, wblank = shutil.which(self.program), shutil.which("apertium-wblank-mode")
        if program is None or wblank is None:
            return None
        data = os.environ.get("APERTIUM_DATADIR") or os.path.join(
            os.path.dirname(os.path.dirname(os.path.realpath(program))), "share", "apertium"
        )
        mode = os.path.join(data, "modes", f"{direction}.mode")
        if not os.path.isfile(mode):
            return None
        try:
            done = subprocess.run([wblank, "-z", mode], capture_output=True, timeout=self.timeout,
                                  check=True)  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.decode().strip() or None

    async def _kept(self, direction: str, text: str) -> tuple[bool, str | None]:
        """(True, the translation by the direction's kept pipeline), or (False, None) where
        there is none (the caller runs one process)."""
        if not self.keep:
            return False, None
        if direction not in self._pipelines:
            command = await asyncio.to_thread(self._mode_command, direction)
            self._pipelines[direction] = _Pipeline(command) if command else None
        pipe, data = self._pipelines[direction], to_stream(text)
        if pipe is None or len(data) > KEPT_MAX:
            return False, None
        try:
            return True, _clean(await asyncio.to_thread(pipe.translate, data, self.timeout))
        except TimeoutError:
            self._pipelines[direction] = None
            self._warn(direction, "apertium %s took over %.1fs: not translated; next questions "
                       "run one process each", direction, self.timeout)  # fmt: skip
            return True, None
        except (OSError, EOFError) as e:
            self._pipelines[direction] = None
            self._warn(direction + " kept", "apertium %s: the kept pipeline failed (%s); one "
                       "process per question from now", direction, e)  # fmt: skip
            return False, None

    async def aclose(self) -> None:
        pipes = [p for p in self._pipelines.values() if p is not None]
        self._pipelines.clear()
        for pipe in pipes:
            await asyncio.to_thread(pipe.kill)

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
        return _clean(out.decode(errors="replace"))

    def _warn(self, key: str, msg: str, *args: object) -> None:
        if key not in self._warned:  # once per direction: a broken install is not news per question
            self._warned.add(key)
            log.warning(msg, *args)
