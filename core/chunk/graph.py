"""The code graph: which names each definition calls, read from the same tree-sitter parse that
chunks the file.

A call is recorded by the name of what is called — ``parse(x)``, ``self.parse(x)``,
``pkg.Parse(x)``, ``new Parser()`` all record ``parse``/``Parse``/``Parser`` — in the order the
calls first appear, nested definitions' calls left to them. Names are resolved against the symbol
table at query time (``BuildReader.symbols``): cheap to store, and a name defined in several
places stays honest about it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from tree_sitter import Node, Query, QueryCursor

from core.chunk.code_langs import language, node_text

MAX_CALLS = 64  # per definition; more says little about what it delegates to

# Per language: the call sites, with the called name captured as @name.
CALLS: dict[str, str] = {
    "python": """
        (call function: [(identifier) @name (attribute attribute: (identifier) @name)])
    """,
    "javascript": """
        (call_expression function: [(identifier) @name
                                    (member_expression property: (property_identifier) @name)])
        (new_expression constructor: (identifier) @name)
    """,
    "go": """
        (call_expression function: [(identifier) @name
                                    (selector_expression field: (field_identifier) @name)])
    """,
    "rust": """
        (call_expression function: [(identifier) @name
                                    (field_expression field: (field_identifier) @name)
                                    (scoped_identifier name: (identifier) @name)])
    """,
    "java": """
        (method_invocation name: (identifier) @name)
        (object_creation_expression type: (type_identifier) @name)
    """,
    "c": """
        (call_expression function: (identifier) @name)
    """,
    "cpp": """
        (call_expression function: [(identifier) @name
                                    (field_expression field: (field_identifier) @name)
                                    (qualified_identifier name: (identifier) @name)])
    """,
    "ruby": """
        (call method: (identifier) @name)
    """,
    "csharp": """
        (invocation_expression function: [
            (identifier) @name
            (generic_name (identifier) @name)
            (member_access_expression
                name: [(identifier) @name (generic_name (identifier) @name)])
            (conditional_access_expression (member_binding_expression
                name: [(identifier) @name (generic_name (identifier) @name)]))])
        (object_creation_expression type: [(identifier) @name (generic_name (identifier) @name)])
    """,
    "php": """
        (function_call_expression function: [(name) @name (qualified_name (name) @name)])
        (member_call_expression name: (name) @name)
        (nullsafe_member_call_expression name: (name) @name)
        (scoped_call_expression name: (name) @name)
        (object_creation_expression [(name) @name (qualified_name (name) @name)])
    """,
    "kotlin": """
        (call_expression . [(identifier) @name (navigation_expression (identifier) @name .)])
    """,
    "swift": """
        (call_expression . [(simple_identifier) @name
                            (navigation_expression suffix: (navigation_suffix
                                                             suffix: (simple_identifier) @name))])
    """,
}
CALLS["typescript"] = CALLS["tsx"] = CALLS["javascript"]


@cache
def _query(lang: str) -> Query:
    return Query(language(lang), CALLS[lang])


def call_sites(root: Node, lang: str) -> list[tuple[int, str]]:
    """Every call of a file, as (byte offset, called name), in file order."""
    if lang not in CALLS:
        return []
    nodes = QueryCursor(_query(lang)).captures(root).get("name", [])
    return sorted((n.start_byte, node_text(n)) for n in nodes if n.text)


def calls_of(
    node: Node, nested: Sequence[Node], sites: Sequence[tuple[int, str]]
) -> tuple[str, ...]:
    """The names ``node`` calls (``sites`` from :func:`call_sites`), first occurrence first,
    leaving out the calls inside the ``nested`` definitions (theirs)."""
    inner = [(n.start_byte, n.end_byte) for n in nested]
    out: dict[str, None] = {}
    for at, name in sites:
        if not node.start_byte <= at < node.end_byte:
            continue
        if any(a <= at < b for a, b in inner):
            continue
        out.setdefault(name, None)
        if len(out) >= MAX_CALLS:
            break
    return tuple(out)
