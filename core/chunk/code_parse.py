"""What the code chunker reads from a file's syntax tree: its definitions (functions, classes,
methods, types: each becomes a chunk and a symbol) and its module-level declarations (constants,
configuration objects, exported values: named in the context line of the module chunk that holds
them, and in the symbol table so that a question naming one gets its chunk as an exact hit).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

from tree_sitter import Node, Query, QueryCursor

from core.chunk.code_langs import (
    CLASSLIKE,
    EXPORT_PATH,
    LANGS,
    SCOPES,
    def_kind,
    def_name,
    default_export,
    header_end,
    language,
    last_row,
    node_text,
)

__all__ = [
    "Decl",
    "Def",
    "collect_defs",
    "declarations",
    "join_names",
    "label",
    "member_constants",
    "walk_defs",
]


@dataclass
class Def:
    name: str
    qualname: str
    kind: str
    node: Node
    start: int  # 0-based first row, including decorators / export / template wrappers
    def_start: int  # row where the definition node itself starts (signature start)
    end: int  # 0-based last row
    hdr_end: int  # last row of the signature / header
    children: list[Def] = field(default_factory=list)


@cache
def _defs_query(lang: str) -> Query:
    types = " ".join(f"({t})" for t in LANGS[lang].defs)
    return Query(language(lang), f"[{types}] @def")


def collect_defs(root: Node, lang: str, default_name: str = "default") -> list[Def]:
    """All definitions, in file order, each linked to its nearest enclosing definition.
    ``default_name`` names an anonymous function that ``export default`` exports."""
    spec = LANGS[lang]
    nodes = QueryCursor(_defs_query(lang)).captures(root).get("def", [])
    nodes.sort(key=lambda n: (n.start_byte, -n.end_byte))
    out: list[Def] = []
    stack: list[Def] = []
    scoped: list[tuple[Def, str]] = []
    for node in nodes:
        if node.type in _FUNCS:  # JS: a definition only as what `export default` exports
            dotted = (def_name(node) or default_name) if default_export(node) else None
        else:
            dotted = def_name(node)
        if not dotted:
            continue
        while stack and stack[-1].node.end_byte <= node.start_byte:
            stack.pop()
        parent = stack[-1] if stack else None
        span = node
        for _ in range(3):  # climb decorators / export / template / typedef wrappers
            up = span.parent
            if up is None or up.type not in spec.wrappers:
                break
            if sum(1 for c in up.named_children if c.type in spec.defs) > 1:
                break
            span = up
        end = last_row(span)
        qual = f"{parent.qualname}.{dotted}" if parent else dotted
        d = Def(
            name=dotted.rsplit(".", 1)[-1],
            qualname=qual,
            kind=def_kind(node, spec, parent.kind if parent else None),
            node=node,
            start=span.start_point.row,
            def_start=node.start_point.row,
            end=end,
            hdr_end=header_end(node, end),
        )
        (parent.children if parent else out).append(d)
        stack.append(d)
        if "." in dotted and d.kind == "function" and node.type == "function_definition":
            scoped.append((d, dotted.rsplit(".", 2)[-2]))
    classes = {d.name for d in walk_defs(out) if d.kind in CLASSLIKE}
    for d, owner in scoped:  # C++ `void Foo::bar() {...}` defined outside its class
        if owner in classes:
            d.kind = "method"
    return out


def walk_defs(defs: list[Def]) -> list[Def]:
    acc: list[Def] = []
    todo = list(reversed(defs))
    while todo:
        d = todo.pop()
        acc.append(d)
        todo.extend(reversed(d.children))
    return acc


# ------------------------------------------------------------------ module-level declarations

MAX_LABEL = 8  # names in one module chunk's context line, then "…"
_FUNCS = frozenset({"arrow_function", "function_expression", "function", "generator_function"})
_JS_DECL = frozenset({"lexical_declaration", "variable_declaration"})
_SCRIPT = frozenset({"python", "javascript", "typescript", "tsx"})
# Where a top-level `val` / `let` is as often a logger or a cache as a constant: named, as in the
# scripting languages, when it spans lines or is CONSTANT_CASE (or Kotlin's `const val`).
_VALS = frozenset({"kotlin", "swift"})


@dataclass(frozen=True)
class Decl:
    """A name module-level code declares: rows 0-based, inclusive; ``kind`` "constant", or
    "function" for a named function an ``export default`` wraps. ``members``: an object literal's
    function-valued keys (JS/TS), as (key, first row, last row)."""

    name: str
    start: int
    end: int
    members: tuple[tuple[str, int, int], ...] = ()
    kind: str = "constant"


def _worth_naming(name: str, node: Node, lang: str) -> bool:
    """A declaration worth a name in a context line and the symbol table. In Python and
    JavaScript/TypeScript, one that spans lines (a configuration object, a template, a table) or
    a CONSTANT_CASE constant: their one-line lower-case bindings are mostly imports and loggers
    (``const fs = require('fs')``, ``log = logging.getLogger(__name__)``). Elsewhere (Go, Rust,
    C, Ruby constants) every top-level declaration is one."""
    if name == "_" or (name.startswith("__") and name.endswith("__")):
        return False
    if lang in _VALS and "const" in _modifiers(node):
        return True
    if lang not in _SCRIPT | _VALS:
        return True
    return node.end_point.row > node.start_point.row or _constant_case(name)


def _modifiers(node: Node) -> list[str]:
    """The words of a declaration's modifier list (C#'s are one node each)."""
    return [w for c in node.children if c.type in ("modifiers", "modifier")
            for w in node_text(c).split()]  # fmt: skip


def _swift_let(node: Node) -> bool:
    """A Swift property bound with `let` (not `var`)."""
    binding = next((c for c in node.named_children if c.type == "value_binding_pattern"), None)
    mut = binding.child_by_field_name("mutability") if binding is not None else None
    return node_text(mut) == "let"


def _val_name(node: Node, lang: str) -> str | None:
    """The name a Kotlin or Swift property declaration binds (None for a destructuring)."""
    if lang == "kotlin":
        var = next((c for c in node.named_children if c.type == "variable_declaration"), None)
        ident = var.named_children[0] if var is not None and var.named_children else None
        return node_text(ident) if ident is not None and ident.type == "identifier" else None
    pattern = node.child_by_field_name("name")
    ident = pattern.child_by_field_name("bound_identifier") if pattern is not None else None
    return node_text(ident).strip("`") if ident is not None else None


def _members(value: Node | None) -> tuple[tuple[str, int, int], ...]:
    if value is None or value.type != "object":
        return ()
    out = []
    for c in value.named_children:
        key, v = c.child_by_field_name("key"), c.child_by_field_name("value")
        if c.type == "method_definition":
            key, v = c.child_by_field_name("name"), c
        if key is None or v is None:
            continue
        funcs = (
            v.type in _FUNCS
            or c.type == "method_definition"
            or (v.type == "array" and any(x.type in _FUNCS for x in v.named_children))
        )
        if funcs and key.type in ("property_identifier", "identifier"):
            out.append((node_text(key), c.start_point.row, last_row(c)))
    return tuple(out)


def _named_function(node: Node | None, depth: int = 3) -> str | None:
    """The name of a named function expression within a few levels of ``node`` (``export
    default connect(state)(function Page(props) {…})``)."""
    if node is None or depth < 0:
        return None
    if node.type in _FUNCS or node.type == "class":
        name = node.child_by_field_name("name")
        return node_text(name) if name is not None else None
    for c in node.named_children:
        found = _named_function(c, depth - 1)
        if found:
            return found
    return None


def _exports_function(value: Node | None) -> bool:
    """An ``export default`` value that is a function, alone or behind a condition."""
    if value is None or value.type in _FUNCS:
        return value is not None
    return value.type in EXPORT_PATH and any(_exports_function(c) for c in value.named_children)


def _js(node: Node) -> list[tuple[str, Node, tuple[tuple[str, int, int], ...]]]:
    if node.type == "export_statement":
        inner = node.child_by_field_name("declaration")
        if inner is not None:
            return _js(inner)
        value = node.child_by_field_name("value")
        if _exports_function(value):
            return []  # a definition (``collect_defs``)
        fn = _named_function(value)  # `export default connect(…)(function Page() {…})`
        return [(fn, node, ())] if fn else []
    if node.type in _JS_DECL:
        out = []
        for d in node.named_children:
            ident, value = d.child_by_field_name("name"), d.child_by_field_name("value")
            if d.type != "variable_declarator" or ident is None or ident.type != "identifier":
                continue
            if value is not None and (value.type in _FUNCS or value.type == "class"):
                continue  # a definition: chunked and named as one already
            out.append((node_text(ident), d, _members(value)))
        return out
    if node.type == "expression_statement":  # exports.X = … / module.exports.X = …
        a = node.named_children[0] if node.named_children else None
        left = a.child_by_field_name("left") if a is not None else None
        if a is not None and a.type == "assignment_expression" and left is not None:
            obj, prop = left.child_by_field_name("object"), left.child_by_field_name("property")
            if (
                obj is not None
                and prop is not None
                and node_text(obj) in ("exports", "module.exports")
            ):
                return [(node_text(prop), node, _members(a.child_by_field_name("right")))]
    return []


def _c_name(d: Node | None) -> str | None:
    while d is not None and d.type not in ("identifier", "function_declarator"):
        d = d.child_by_field_name("declarator")
    return node_text(d) if d is not None and d.type == "identifier" else None


def _names(node: Node, lang: str) -> list[tuple[str, Node, tuple[tuple[str, int, int], ...]]]:
    t = node.type
    if lang in ("javascript", "typescript", "tsx"):
        return _js(node)
    if lang == "python" and t == "expression_statement" and node.named_children:
        a = node.named_children[0]
        left = a.child_by_field_name("left") if a.type == "assignment" else None
        if left is not None and left.type == "identifier":
            return [(node_text(left), node, ())]
        if left is not None and left.type in ("pattern_list", "tuple_pattern"):
            return [(node_text(x), node, ()) for x in left.named_children if x.type == "identifier"]
    if lang == "go" and t in ("const_declaration", "var_declaration"):
        specs = [s for c in node.named_children
                 for s in (c.named_children if c.type == "var_spec_list" else [c])]  # fmt: skip
        return [(node_text(n), s, ()) for s in specs if s.type in ("const_spec", "var_spec")
                for n in s.children_by_field_name("name")]  # fmt: skip
    if lang == "rust" and t in ("const_item", "static_item", "type_item"):
        name = node.child_by_field_name("name")
        return [(node_text(name), node, ())] if name is not None else []
    if lang in ("c", "cpp") and t in ("preproc_def", "preproc_function_def"):
        name = node.child_by_field_name("name")
        return [(node_text(name), node, ())] if name is not None else []
    if lang in ("c", "cpp") and t == "declaration":
        names = [_c_name(d) for d in node.children_by_field_name("declarator")]
        return [(n, node, ()) for n in names if n]
    if lang == "php" and t == "const_declaration":
        return [(node_text(n), node, ()) for e in node.named_children if e.type == "const_element"
                for n in e.named_children[:1] if n.type == "name"]  # fmt: skip
    if lang in _VALS and t == "property_declaration":
        bound = _val_name(node, lang)
        return [(bound, node, ())] if bound else []
    if lang == "ruby" and t == "assignment":
        left = node.child_by_field_name("left")
        if left is not None and left.type == "scope_resolution":
            left = left.child_by_field_name("name")
        if left is not None and left.type == "constant":
            return [(node_text(left), node, ())]
    return []


# Declarations that name a function: a named `export default function`, C's `#define F(x) …`.
_CALLABLE_DECLS = frozenset({"export_statement", "preproc_function_def"})
# C / C++: an include guard, `#if` branches and `extern "C" { … }` wrap a header's top level
# (and, where a macro the parser could not read broke it, an error node does).
_C_BLOCKS = frozenset(
    {"preproc_ifdef", "preproc_if", "preproc_else", "preproc_elif", "preproc_elifdef",
     "linkage_specification", "declaration_list", "ERROR"}
)  # fmt: skip


def _top_level(root: Node, lang: str) -> list[Node]:
    if lang not in ("c", "cpp"):
        return list(root.named_children)
    out: list[Node] = []
    todo = list(reversed(root.named_children))
    while todo:
        node = todo.pop()
        if node.type in _C_BLOCKS:
            todo.extend(reversed(node.named_children))
        else:
            out.append(node)
    return out


def declarations(root: Node, lang: str) -> list[Decl]:
    """The declarations of a file's top level worth naming (:func:`_worth_naming`), in file
    order. Definitions (functions, classes, ``const f = () => …``) are not among them."""
    out: list[Decl] = []
    for node in _top_level(root, lang):
        for name, span, members in _names(node, lang):
            if name and _worth_naming(name, span, lang):
                kind = "function" if span.type in _CALLABLE_DECLS else "constant"
                out.append(Decl(name, span.start_point.row, last_row(span), members, kind))
    return out


def label(decls: list[Decl], a: int, b: int) -> str | None:
    """The context-line label of module code on rows a..b: each declaration it overlaps, and
    each member whose first row it holds (``defaults.transformRequest``); None when none."""
    names: list[str] = []
    for d in decls:
        if d.start > b or d.end < a:
            continue
        names.append(d.name)
        names.extend(f"{d.name}.{k}" for k, s, _ in d.members if a <= s <= b)
    return join_names(names)


def join_names(names: list[str]) -> str | None:
    """Names as a context line lists them: each once, the first :data:`MAX_LABEL`, then "…"."""
    names = list(dict.fromkeys(names))  # C's `#define X` in each `#if` branch; overloads
    if not names:
        return None
    return ", ".join(names[:MAX_LABEL]) + (", …" if len(names) > MAX_LABEL else "")


# ------------------------------------------------------------------ constants inside definitions

_BODIES = frozenset(
    {"class_body", "interface_body", "block", "body_statement", "declaration_list",
     "enum_class_body"}
)  # fmt: skip


def _member_names(node: Node, lang: str) -> list[str]:
    """The constants one statement of a class / module / impl body declares."""
    t = node.type
    if lang == "java" and t in ("field_declaration", "constant_declaration"):
        mods = next((node_text(c) for c in node.named_children if c.type == "modifiers"), "")
        if t == "field_declaration" and not ("static" in mods.split() and "final" in mods.split()):
            return []
        names = (d.child_by_field_name("name") for d in node.children_by_field_name("declarator"))
        return [node_text(n) for n in names if n is not None]
    if lang == "python" and t == "expression_statement" and node.named_children:
        left = node.named_children[0].child_by_field_name("left")
        text = node_text(left) if left is not None and left.type == "identifier" else ""
        return [text] if _constant_case(text) else []
    if lang == "ruby" and t == "assignment":
        left = node.child_by_field_name("left")
        return [node_text(left)] if left is not None and left.type == "constant" else []
    if lang == "csharp" and t == "field_declaration":
        words = _modifiers(node)
        if "const" not in words and not ("static" in words and "readonly" in words):
            return []
        var = next((c for c in node.named_children if c.type == "variable_declaration"), None)
        idents = [d.child_by_field_name("name") for d in var.named_children] if var else []
        return [node_text(n) for n in idents if n is not None]
    if lang == "php" and t == "const_declaration":
        return [n for n, _, _ in _names(node, lang)]
    if lang in _VALS and t == "property_declaration":
        bound = _val_name(node, lang) or ""
        words = _modifiers(node)
        const = "const" in words or ("static" in words and _swift_let(node))
        return [bound] if bound and (const or _constant_case(bound)) else []
    if lang == "rust" and t == "const_item":
        ident = node.child_by_field_name("name")
        return [node_text(ident)] if ident is not None else []
    if lang in _SCRIPT and t in ("public_field_definition", "field_definition"):
        prop = node.child_by_field_name("name") or node.child_by_field_name("property")
        static = any(c.type == "static" for c in node.children)
        return [node_text(prop)] if static and _constant_case(node_text(prop)) else []
    return []


def _constant_case(name: str) -> bool:
    return sum(c.isalpha() for c in name) > 1 and name.isupper()


def member_constants(defs: list[Def], lang: str) -> list[tuple[str, str, int, int]]:
    """Constants declared in the bodies of classes, interfaces, modules and impls, as (name,
    ``Owner.NAME``, first row, last row): Java ``static final`` fields and interface constants,
    Ruby constants, Python and TS/JS ``static`` CONSTANT_CASE attributes, Rust associated
    consts. For the symbol table only: their lines are chunked with the owner already."""
    out = []
    for d in walk_defs(defs):
        if d.kind not in CLASSLIKE and d.kind not in SCOPES:
            continue
        body = d.node.child_by_field_name("body")
        if body is None:
            body = next((c for c in d.node.named_children if c.type in _BODIES), None)
        members = list(body.named_children) if body is not None else []
        for c in list(members):  # Kotlin: a companion object's constants are its class's
            if c.type == "companion_object":
                inner = next((b for b in c.named_children if b.type == "class_body"), None)
                members += inner.named_children if inner is not None else []
        for c in members:
            for name in _member_names(c, lang):
                out.append((name, f"{d.qualname}.{name}", c.start_point.row, last_row(c)))
    return out
