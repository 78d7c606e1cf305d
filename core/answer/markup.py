"""How quoted text is shown in chat clients: documentation markup as they read it
(:func:`prose_markup`: Sphinx and MyST roles as the spans they name, reStructuredText's
``literal`` as `literal`) and code spans that close within their quote (:func:`balance_ticks`).
Slack, Discord and the web page render an unpaired backtick as a span running on through the
citation into the next source's line.
"""

from __future__ import annotations

import re

from core.chunk.text import RST_LITERAL


def prose_markup(s: str, literals: bool = True) -> str:
    """Documentation markup as chat clients read it: a Sphinx or MyST role as the span it names
    (":meth:`load`" → "`load`", ":issue:`12`" → "#12"), and with ``literals`` reStructuredText's
    ``literal`` as `literal` (not in code where two backticks mean something: a JavaScript
    template literal, a Go raw string)."""
    return _ROLE.sub(_role, RST_LITERAL.sub(r"`\1`", s) if literals else s)


# A Sphinx role (":meth:`load`", ":py:class:`X`") or a MyST one ("{class}`X`") of a known name.
_ROLES = (
    "attr|class|const|data|doc|envvar|exc|file|func|issue|kbd|meth|mod|obj|option|pr|program|"
    "ref|term|user|command|any|pep|rfc"
)
_ROLE = re.compile(
    rf"(?:(?<![\w`]):(?:py:|std:)?(?P<a>{_ROLES}):|\{{(?:py:|std:)?(?P<b>{_ROLES})\}})"
    r"`(?P<t>[^`\n]+)`"
)
_TITLED = re.compile(r"(.+?)\s*<[^<>]+>$")


def _role(m: re.Match[str]) -> str:
    """A role as the span it names: its title if it has one, else its target ("~" and "!"
    dropped); an issue or pull request as #N, a user as @name."""
    role, t = m.group("a") or m.group("b"), m.group("t").strip()
    titled = _TITLED.match(t)
    t = titled.group(1) if titled else t.lstrip("~!")
    if role in ("issue", "pr") and t.isdigit():
        return f"#{t}"
    return f"@{t}" if role == "user" else f"`{t}`"


_TICK = re.compile(r"(?<!`)`(?!`)")  # one backtick, not part of a run
_CLOSES = frozenset(",.;:!?)]}'\"")


def balance_ticks(s: str) -> str:
    """Text whose single backticks pair up, so that a chat client's code span ends inside the
    quote: a sentence cut inside a span (by the clip, by the sentence splitter), a heading or an
    issue title written with one backtick too few, a code line that opens a template literal.
    Read left to right, a backtick that can only close (after a word, before a space, a
    punctuation mark or the end) while no span is open lost its opening, which goes at the start
    of its word; a span still open at the end lost its closing, which goes at the end of the
    quote when the clip cut it, else at the end of its word. A fix that would make a run of
    backticks (read as a fence or a wider span) gives way to closing the first span at the end
    of its word. Nothing is removed but a backtick the clip left alone before its ellipsis."""
    ticks = [m.start() for m in _TICK.finditer(s)]
    if len(ticks) % 2 == 0:
        return s
    if s.endswith("` …") and ticks[-1] == len(s) - 3:  # the clip kept only a span's opening
        return s[:-3].rstrip() + " …"
    fixes = [_tick_fix(s, ticks), _word_end(s, ticks[0])]
    for at in fixes:
        if at is not None and s[at - 1 : at] != "`" and s[at : at + 1] != "`":
            return s[:at] + "`" + s[at:]
    return s


def _word_end(s: str, t: int) -> int:
    end = t + 1
    while end < len(s) and not s[end].isspace():
        end += 1
    return end


def _tick_fix(s: str, ticks: list[int]) -> int | None:
    """Where :func:`balance_ticks` puts the missing backtick, reading the spans left to right."""
    opened = -1
    for t in ticks:
        if opened >= 0:
            opened = -1
            continue
        before = s[t - 1] if t else " "
        after = s[t + 1] if t + 1 < len(s) else " "
        if not before.isspace() and (after.isspace() or after in _CLOSES):
            at = t
            while at > 0 and not s[at - 1].isspace():
                at -= 1
            return at
        opened = t
    if s.endswith(" …") and opened == ticks[-1]:
        return len(s) - 2
    return _word_end(s, opened) if opened >= 0 else None
