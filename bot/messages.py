"""Every sentence the bots say to people, in one place.

Both platforms render `code` and bold the same way except Slack's single ``*`` (Discord: ``**``),
so functions that bold take the platform's marker. Mentions are built by the adapters.
"""

from __future__ import annotations

import math


def _names(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def usage(allowed: list[str], default: str | None, example_prefix: str) -> str:
    """Help for ``/repo``, ``/repo help`` and Discord's ``/ask`` without a question."""
    lines = [
        f"Ask me about a code repository: `{example_prefix} [instance] your question`.",
        "I answer in a thread with numbered sources that link to the exact lines, docs section "
        "or issue. Reply in the thread (mentioning me) to follow up.",
    ]
    if allowed:
        lines.append(f"Available in this channel: {_names(allowed)}.")
        if default:
            lines.append(f"Without an instance name, `{default}` answers here.")
        else:
            lines.append(f"Example: `{example_prefix} {allowed[0]} where is the config parsed?`")
    else:
        lines.append(no_instance_here())
    return "\n".join(lines)


def no_instance_here() -> str:
    return (
        "No repository is available in this channel. An admin can allow one in its instance "
        "file (`access:`)."
    )


def not_here(name: str, allowed: list[str]) -> str:
    """``name`` may be anything a person typed (Discord's instance option): shown clipped, as
    code, with no backtick to break out of it."""
    name = name.replace("`", "'")[:60]
    rest = f" Available here: {_names(allowed)}." if allowed else ""
    return f"`{name}` is not available in this channel.{rest}"


def choose_instance(allowed: list[str], example_prefix: str) -> str:
    return (
        f"Several repositories are available here: {_names(allowed)}. Name one first, e.g. "
        f"`{example_prefix} {allowed[0]} how is the timeout configured?`"
    )


def no_question(instance: str, example_prefix: str) -> str:
    return f"What would you like to know about `{instance}`? e.g. `{example_prefix} {instance} …`"


def asked(mention: str, instance: str, question: str, bold: str = "*") -> str:
    return f"{mention} asked {bold}{instance}{bold}:\n> " + question.replace("\n", "\n> ")


def too_long(length: int, limit: int) -> str:
    return (
        f"That question is {length:,} characters long; I read at most {limit:,}. Please ask it "
        "in fewer words (quote only the lines that matter)."
    )


def searching(instance: str) -> str:
    return f"Searching `{instance}` …"


WRITING = "Writing the answer … (a preview: sources and checks come with the answer)"


def rate_limited(wait_s: float) -> str:
    return f"You're asking faster than I can answer: please try again in {math.ceil(wait_s)} s."


def busy() -> str:
    return "I'm answering a lot of questions right now: please ask again in a minute."


def failed(what: str) -> str:
    """``what``: the error's ``user_line`` (``core/errors.py``), e.g. "the repository could not
    be read"."""
    return f"Sorry, I couldn't answer that: {what}. The details are in the bot's log."


def restarting() -> str:
    return "The bot is restarting: please ask again in a minute."


def interrupted() -> str:
    return ("The bot restarted before this answer was finished: please ask again in a "
            "minute.")  # fmt: skip


def missing_permission(platform: str, needed: str) -> str:
    return (
        f"I'm missing the {platform} permission `{needed}`: ask an admin to grant it to the app "
        "(and reinstall it on Slack), then ask again."
    )


def cannot_post(error: str) -> str:
    return (
        f"I can't post in this channel ({error}). Invite me to it (`/invite @repo-expert`) "
        "and ask again."
    )


def cannot_thread(error: str) -> str:
    return (
        f"I can't open a thread here ({error}): I need the Create Public Threads and Send "
        "Messages in Threads permissions."
    )


SOURCES = "Sources"
FEEDBACK_UP = "👍 Helpful"
FEEDBACK_DOWN = "👎 Not helpful"


def feedback_thanks(verdict: str) -> str:
    return "Thanks, glad it helped." if verdict == "up" else "Thanks: noted, that helps us improve."


def feedback_unknown() -> str:
    return "I can't find that answer any more, so the feedback wasn't recorded."


def continued(part: int, total: int) -> str:
    return f"(part {part} of {total})"


def thread_name(question: str) -> str:
    q = " ".join(question.split())
    return q if len(q) <= 90 else q[:89].rstrip() + "…"


def unsupported(sentences: list[str]) -> str:
    """The sentences the support check could not find in the sources they cite."""
    shown = "; ".join(f"“{s[:120]}”" for s in sentences[:3])
    more = f" (+{len(sentences) - 3} more)" if len(sentences) > 3 else ""
    return f"⚠ Not supported by the sources they cite: {shown}{more}"
