"""Per-language tables for the tree-sitter code chunker (see ``core.chunk.code``)."""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from functools import cache

from tree_sitter import Language, Node

# Kinds whose nested functions are "methods" and whose members are grouped when split.
CLASSLIKE = frozenset({"class", "struct", "interface", "trait", "impl", "enum", "record", "union"})
# Kinds whose members are chunked one by one (like top-level items) when split.
SCOPES = frozenset({"namespace", "module"})

_C_COMMENTS = ("//", "/*", "*")


@dataclass(frozen=True)
class LangSpec:
    module: str  # python module of the grammar wheel
    func: str  # function in that module returning the language pointer
    defs: dict[str, str]  # node type -> symbol kind
    wrappers: frozenset[str] = frozenset()  # parents whose lines belong to the definition
    comments: tuple[str, ...] = _C_COMMENTS  # line prefixes attached to the next definition
    method_parents: frozenset[str] = CLASSLIKE  # parent kinds turning a function into a method


_JS_DEFS = {
    "function_declaration": "function",
    "generator_function_declaration": "function",
    "class_declaration": "class",
    "method_definition": "method",
    "variable_declarator": "function",  # only `const f = () => ...` / `= class ...`
    # only as the value of `export default` (:func:`default_export`)
    "function_expression": "function",
    "arrow_function": "function",
    "generator_function": "function",
}
_TS_DEFS = {
    **_JS_DEFS,
    "abstract_class_declaration": "class",
    "interface_declaration": "interface",
    "enum_declaration": "enum",
    "type_alias_declaration": "type",
    "internal_module": "namespace",
    "module": "module",
}
# (an expression is a wrapper only between `export default` and the function it exports)
EXPORT_PATH = frozenset({"binary_expression", "parenthesized_expression"})
_JS_WRAPPERS = frozenset(
    {"export_statement", "lexical_declaration", "variable_declaration", *EXPORT_PATH}
)
_TS_WRAPPERS = _JS_WRAPPERS | {"ambient_declaration", "expression_statement"}
_JS_COMMENTS = (*_C_COMMENTS, "@")
_CSHARP_DEFS = {
    "class_declaration": "class",
    "interface_declaration": "interface",
    "struct_declaration": "struct",
    "enum_declaration": "enum",
    "record_declaration": "record",
    "method_declaration": "method",
    "constructor_declaration": "method",
    "local_function_statement": "function",
    # members that compile to methods: where .NET documents an option and its default
    "property_declaration": "method",
    "event_declaration": "method",
    "indexer_declaration": "method",
    "operator_declaration": "method",
    "conversion_operator_declaration": "method",
}
_PHP_DEFS = {
    "class_declaration": "class",
    "interface_declaration": "interface",
    "trait_declaration": "trait",
    "enum_declaration": "enum",
    "function_definition": "function",
    "method_declaration": "method",
}
_KOTLIN_DEFS = {
    "class_declaration": "class",  # also interface / enum class: def_kind reads the keyword
    "object_declaration": "class",
    "function_declaration": "function",
    "secondary_constructor": "method",
}
_SWIFT_DEFS = {
    "class_declaration": "class",  # also struct / enum / extension / actor: declaration_kind
    "protocol_declaration": "interface",
    "function_declaration": "function",
    "protocol_function_declaration": "method",
    "init_declaration": "method",
    "subscript_declaration": "method",
    "typealias_declaration": "type",
}
_C_DEFS = {
    "function_definition": "function",
    "struct_specifier": "struct",
    "union_specifier": "union",
    "enum_specifier": "enum",
}

LANGS: dict[str, LangSpec] = {
    "python": LangSpec(
        "tree_sitter_python",
        "language",
        {"function_definition": "function", "class_definition": "class"},
        frozenset({"decorated_definition"}),
        ("#", "@"),
    ),
    "javascript": LangSpec(
        "tree_sitter_javascript", "language", _JS_DEFS, _JS_WRAPPERS, _JS_COMMENTS
    ),
    "typescript": LangSpec(
        "tree_sitter_typescript", "language_typescript", _TS_DEFS, _TS_WRAPPERS, _JS_COMMENTS
    ),
    "tsx": LangSpec("tree_sitter_typescript", "language_tsx", _TS_DEFS, _TS_WRAPPERS, _JS_COMMENTS),
    "go": LangSpec(
        "tree_sitter_go",
        "language",
        {
            "function_declaration": "function",
            "method_declaration": "method",
            "type_spec": "type",
            "type_alias": "type",
        },
        frozenset({"type_declaration"}),
    ),
    "rust": LangSpec(
        "tree_sitter_rust",
        "language",
        {
            "function_item": "function",
            "struct_item": "struct",
            "enum_item": "enum",
            "union_item": "union",
            "trait_item": "trait",
            "impl_item": "impl",
            "mod_item": "module",
            "macro_definition": "macro",
        },
        comments=(*_C_COMMENTS, "#["),
    ),
    "java": LangSpec(
        "tree_sitter_java",
        "language",
        {
            "class_declaration": "class",
            "interface_declaration": "interface",
            "enum_declaration": "enum",
            "record_declaration": "record",
            "annotation_type_declaration": "interface",
            "method_declaration": "method",
            "constructor_declaration": "method",
        },
        comments=_JS_COMMENTS,
    ),
    "c": LangSpec(
        "tree_sitter_c", "language", _C_DEFS, frozenset({"type_definition", "declaration"})
    ),
    "cpp": LangSpec(
        "tree_sitter_cpp",
        "language",
        {**_C_DEFS, "class_specifier": "class", "namespace_definition": "namespace"},
        frozenset({"type_definition", "declaration", "template_declaration"}),
    ),
    "ruby": LangSpec(
        "tree_sitter_ruby",
        "language",
        {
            "class": "class",
            "module": "module",
            "method": "function",
            "singleton_method": "method",
        },
        comments=("#",),
        method_parents=CLASSLIKE | {"module"},
    ),
    "csharp": LangSpec("tree_sitter_c_sharp", "language", _CSHARP_DEFS),
    "php": LangSpec("tree_sitter_php", "language_php", _PHP_DEFS, comments=(*_C_COMMENTS, "#")),
    "kotlin": LangSpec("tree_sitter_kotlin", "language", _KOTLIN_DEFS, comments=_JS_COMMENTS),
    "swift": LangSpec("tree_sitter_swift", "language", _SWIFT_DEFS, comments=_JS_COMMENTS),
}

_EXT: dict[str, str] = {
    **dict.fromkeys((".py", ".pyi", ".pyw"), "python"),
    **dict.fromkeys((".js", ".mjs", ".cjs", ".jsx"), "javascript"),
    **dict.fromkeys((".ts", ".mts", ".cts"), "typescript"),
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    **dict.fromkeys((".c", ".h"), "c"),
    **dict.fromkeys(
        (".cc", ".cpp", ".cxx", ".c++", ".hh", ".hpp", ".hxx", ".h++", ".ipp", ".inl", ".tpp"),
        "cpp",
    ),
    **dict.fromkeys((".rb", ".rake", ".gemspec", ".ru"), "ruby"),
    **dict.fromkeys((".cs", ".csx"), "csharp"),
    ".php": "php",
    **dict.fromkeys((".kt", ".kts"), "kotlin"),
    ".swift": "swift",
}
_NAMES: dict[str, str] = {"Rakefile": "ruby", "Gemfile": "ruby", "Guardfile": "ruby"}


@cache
def language(lang: str) -> Language:
    """The tree-sitter grammar of ``lang`` (from its wheel; loaded once)."""
    spec = LANGS[lang]
    return Language(getattr(importlib.import_module(spec.module), spec.func)())


def language_for_path(path: str) -> str | None:
    """The chunker's language name for a file path, or None when unsupported."""
    base = os.path.basename(path.replace("\\", "/"))
    if base in _NAMES:
        return _NAMES[base]
    return _EXT.get(os.path.splitext(base)[1].lower())


# Languages whose comments start "#"; the others the chunker parses comment C's way (//, /* */),
# and in them a line starting "#" is code: Rust's attributes (#[test]), C's preprocessor
# (#include, #define), JavaScript's private members (#cache = …).
_HASH_COMMENT = frozenset({"python", "ruby"})


def comment_style(lang: str | None) -> str:
    """How a language (:func:`language_for_path`) marks a comment line: "#" (Python, Ruby),
    "//" (the C family: Rust, Go, Java, JavaScript, TypeScript, C, C++, C#, Kotlin, Swift), ""
    either (None: the files the chunker has no grammar for — shell, YAML, TOML, Makefiles …;
    PHP, which has both)."""
    if lang is None or lang == "php":
        return ""
    return "#" if lang in _HASH_COMMENT else "//"


# ---------------------------------------------------------------- node helpers

_TEMPLATE_ARGS = re.compile(r"<[^<>]*>")
_FUNC_VALUES = frozenset(
    {"arrow_function", "function_expression", "function", "generator_function"}
)


def node_text(node: Node | None) -> str:
    return node.text.decode("utf-8", "replace") if node is not None and node.text else ""


def norm_name(name: str) -> str:
    prev = ""
    while prev != name:
        prev, name = name, _TEMPLATE_ARGS.sub("", name)
    return re.sub(r"\s+", "", name).replace("::", ".").strip(".\"'`")


def last_row(node: Node) -> int:
    row, col = node.end_point
    return row - 1 if col == 0 and row > node.start_point.row else row


def default_export(node: Node) -> bool:
    """Whether a function or arrow expression is what an ``export default`` exports: alone, or
    behind a condition (``export default isSupported && function httpAdapter(config) {…}``,
    ``… && (async (config) => {…})``). Any other is a value (a callback), not a definition."""
    up = node.parent
    while up is not None and up.type in EXPORT_PATH:
        up = up.parent
    return up is not None and up.type == "export_statement"


def def_name(node: Node) -> str | None:
    """Possibly dotted name of a definition node ("Recv.Method" for Go), None if not a def."""
    t = node.type
    if t == "method_declaration" and node.child_by_field_name("receiver") is not None:  # Go
        recv = node.child_by_field_name("receiver")
        params = (
            [c for c in recv.named_children if c.type == "parameter_declaration"] if recv else []
        )
        typ = (
            norm_name(re.sub(r"\[.*\]", "", node_text(params[0].child_by_field_name("type"))))
            if params
            else ""
        )
        name = node_text(node.child_by_field_name("name"))
        return f"{typ.lstrip('*')}.{name}" if typ.lstrip("*") else name
    if t == "impl_item":
        words = re.findall(r"[A-Za-z_]\w*", norm_name(node_text(node.child_by_field_name("type"))))
        return words[-1] if words else None
    if t == "variable_declarator":
        value, name_node = node.child_by_field_name("value"), node.child_by_field_name("name")
        ok = value is not None and (value.type in _FUNC_VALUES or value.type == "class")
        return node_text(name_node) if ok and name_node and name_node.type == "identifier" else None
    if t in (
        "struct_specifier",
        "union_specifier",
        "enum_specifier",
        "class_specifier",
        "mod_item",
    ):
        if node.child_by_field_name("body") is None:
            return None
        parent = node.parent
        if node.child_by_field_name("name") is None and parent and parent.type == "type_definition":
            return norm_name(node_text(parent.child_by_field_name("declarator"))) or None
    if t in _UNNAMED:  # (a Swift subscript's `name` field is its return type)
        return _UNNAMED[t]
    name_node = node.child_by_field_name("name")
    if name_node is None and t == "function_definition":  # C / C++ declarator chain
        d = node.child_by_field_name("declarator")
        while d is not None and d.type != "function_declarator":
            nxt = d.child_by_field_name("declarator")
            d = nxt or next((c for c in d.named_children if c.type.endswith("declarator")), None)
        name_node = d.child_by_field_name("declarator") if d is not None else None
    if name_node is None:
        return _operator_name(node)
    return norm_name(node_text(name_node)) or None


# Members the grammar gives no name: named as their language calls them.
_UNNAMED = {"indexer_declaration": "this", "secondary_constructor": "constructor",
            "subscript_declaration": "subscript"}  # fmt: skip


def _operator_name(node: Node) -> str | None:
    """C#'s `operator +` and `implicit operator int`: ``operator+``, ``operatorint``."""
    if node.type == "operator_declaration":
        op = node_text(node.child_by_field_name("operator")).strip()
        return f"operator{op}" if op else None
    if node.type == "conversion_operator_declaration":
        typ = norm_name(node_text(node.child_by_field_name("type")))
        return f"operator{typ}" if typ else None
    return None


_SWIFT_KINDS = {"struct": "struct", "enum": "enum", "extension": "impl", "protocol": "interface"}
# A definition's body where the grammar gives it no field (Kotlin's classes and functions).
_BODY_TYPES = frozenset({"class_body", "enum_class_body", "function_body"})


def def_kind(node: Node, spec: LangSpec, parent_kind: str | None) -> str:
    kind = spec.defs[node.type]
    if node.type == "type_spec":
        typ = node.child_by_field_name("type")
        kind = {"struct_type": "struct", "interface_type": "interface"}.get(
            typ.type if typ else "", kind
        )
    elif node.type == "variable_declarator":
        value = node.child_by_field_name("value")
        kind = "class" if value is not None and value.type == "class" else kind
    elif node.type == "class_declaration" and spec.module == "tree_sitter_swift":
        word = node_text(node.child_by_field_name("declaration_kind"))
        kind = _SWIFT_KINDS.get(word, kind)
    elif node.type == "class_declaration" and spec.module == "tree_sitter_kotlin":
        words = {c.type for c in node.children} | set(
            node_text(next((c for c in node.children if c.type == "modifiers"), None)).split()
        )
        kind = "interface" if "interface" in words else "enum" if "enum" in words else kind
    if kind == "function" and parent_kind in spec.method_parents:
        kind = "method"
    return kind


def header_end(node: Node, end: int) -> int:
    """Last row of the definition's signature: up to the body's opening brace / colon line."""
    start = node.start_point.row
    body = node.child_by_field_name("body")
    if node.type == "type_spec":
        body = node.child_by_field_name("type")
    elif node.type == "variable_declarator":
        value = node.child_by_field_name("value")
        body = value.child_by_field_name("body") if value is not None else None
    elif body is None:
        body = next((c for c in node.named_children if c.type in _BODY_TYPES), None)
    if body is not None and body.type == "function_body" and body.named_children:
        inner = body.named_children[0]  # Kotlin: `{ … }` is a block inside the function body
        body = inner if inner.type == "block" else body
    if body is None:
        return start
    row = body.start_point.row
    if body.children and body.children[0].is_named:  # Python / Ruby: no brace, first statement
        prev = body.prev_sibling
        while prev is not None and prev.is_extra:  # comments between header and body
            prev = prev.prev_sibling
        row = prev.end_point.row if prev is not None else start
    return max(start, min(row, end))


def default_export_name(path: str) -> str:
    """What names a file's anonymous ``export default`` function: the file's name (``xhr`` for
    ``lib/adapters/xhr.js``), an index file's its folder's (which it is imported by)."""
    parts = path.replace("\\", "/").split("/")
    stem = parts[-1].split(".")[0]
    return (parts[-2] if stem == "index" and len(parts) > 1 else stem) or "default"
