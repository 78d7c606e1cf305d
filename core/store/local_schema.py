"""The local store's build format: the SQLite schema of a build's ``meta.sqlite`` and the row
shapes both its reader and its writer use (``local.py``, ``local_write.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.lexical import parts
from core.models import COLLECTIONS, Chunk, Symbol

# Part of every build's stamp (``build.build_stamp``). Bump it, too, when what a writer derives
# from the chunks changes (lexical forms, postings, symbol norms): an update that
# finds nothing changed keeps the live build as it is (``build._keep_live``), so only a stamp
# that differs makes an unchanged repository's build be written again.
SCHEMA_VERSION = 5  # 3: the code graph (symbols.calls, calls); 4: issue links; 5: repo columns


# A collection's FTS5 table over the lexical forms (rowid = chunks.id).
FTS = "CREATE VIRTUAL TABLE fts_{c} USING fts5(body, tokenize='unicode61 remove_diacritics 2');"

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE units (
    key TEXT PRIMARY KEY, collection TEXT NOT NULL, content_hash TEXT NOT NULL,
    path TEXT, issue INTEGER, title TEXT, url TEXT,
    repo TEXT NOT NULL DEFAULT ''  -- its repository in an instance over several ('' for one)
);
CREATE TABLE chunks (
    id INTEGER PRIMARY KEY, collection TEXT NOT NULL, row INTEGER NOT NULL,
    doc_key TEXT NOT NULL, path TEXT, issue INTEGER, start_line INTEGER, end_line INTEGER,
    title TEXT NOT NULL, symbol TEXT, kind TEXT, text TEXT NOT NULL, text_hash TEXT NOT NULL,
    tokens INTEGER NOT NULL, url TEXT NOT NULL, commit_sha TEXT, repo TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX chunks_row ON chunks(collection, row);
CREATE INDEX chunks_doc ON chunks(doc_key);
CREATE INDEX chunks_issue ON chunks(issue);
CREATE TABLE symbols (
    name TEXT NOT NULL, qualname TEXT NOT NULL, kind TEXT NOT NULL, path TEXT NOT NULL,
    start_line INTEGER NOT NULL, end_line INTEGER NOT NULL,
    norm TEXT NOT NULL,  -- parts joined, lower case: parse_config, parseConfig → parseconfig
    calls TEXT NOT NULL DEFAULT '',  -- the names it calls, one per line, first call first
    repo TEXT NOT NULL DEFAULT ''
);
CREATE TABLE calls (norm TEXT NOT NULL, sym INTEGER NOT NULL);  -- callee's norm → symbols.rowid
CREATE INDEX calls_norm ON calls(norm);
CREATE TABLE links (
    issue INTEGER NOT NULL, rel TEXT NOT NULL, target TEXT NOT NULL, repo TEXT NOT NULL DEFAULT ''
);
CREATE INDEX links_issue ON links(issue);
CREATE INDEX links_target ON links(rel, target);
CREATE INDEX symbols_name ON symbols(name);
CREATE INDEX symbols_norm ON symbols(norm);
CREATE INDEX symbols_qualname ON symbols(qualname);
CREATE INDEX chunks_path ON chunks(path);
{fts}-- BM25 without FTS5's per-row bm25() (local_index.py): per token, the rows holding it and how
-- often (int32 / uint16 arrays, one part per slice of rows), and each row's token count.
-- Builds written before these tables existed are ranked by FTS5 alone.
CREATE TABLE postings (
    collection TEXT NOT NULL, term TEXT NOT NULL, part INTEGER NOT NULL,
    rows BLOB NOT NULL, tfs BLOB NOT NULL, PRIMARY KEY (collection, term, part)
) WITHOUT ROWID;
CREATE TABLE lexstats (collection TEXT PRIMARY KEY, lengths BLOB NOT NULL);
""".replace("{fts}", "\n".join(FTS.format(c=c) for c in COLLECTIONS) + "\n")


CHUNK_COLS = (
    "id, collection, row, doc_key, path, issue, start_line, end_line, title, symbol, kind, "
    "text, text_hash, tokens, url, commit_sha, repo"
)


SYMBOL_COLS = "name, qualname, kind, path, start_line, end_line, calls, repo"


def norm_name(name: str) -> str:
    return "".join(parts(name))


def fts_match(terms: Sequence[str]) -> str | None:
    """The FTS5 MATCH expression for any of ``terms`` (each quoted: a term is a literal token)."""
    if not terms:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def row_to_symbol(r: Any) -> Symbol:
    return Symbol(
        r[0], r[1], r[2], r[3], r[4], r[5], tuple(r[6].split("\n")) if r[6] else (), r[7] or ""
    )


def row_to_chunk(r: Any) -> Chunk:
    return Chunk(
        id=r[0], collection=r[1], doc_key=r[3], path=r[4], issue=r[5], start_line=r[6],
        end_line=r[7], title=r[8], symbol=r[9], kind=r[10] or "", text=r[11], text_hash=r[12],
        tokens=r[13], url=r[14], commit=r[15], repo=r[16] or "",
    )  # fmt: skip
