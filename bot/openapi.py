"""The OpenAPI 3.1 document of ``serve api`` (``GET /openapi.json``), with this server's limits."""

from __future__ import annotations

from typing import Any

from .settings import ServeConfig


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ERRORS = {
    "400": _json(_ref("Error"), "Bad input: invalid JSON, an unknown field, a bad value"),
    "401": _json(_ref("Error"), "No API key, or not a valid one"),
    "403": _json(_ref("Error"), "No key is configured and the call is not from 127.0.0.1"),
    "404": _json(_ref("Error"), "No such instance (or one this key may not use), no such turn"),
    "413": _json(_ref("Error"), "The body or the question is too long"),
    "429": _json(_ref("Error"), "Too many questions from this caller; try again shortly"),
    "503": _json(_ref("Error"), "The index or the embedding model is not available"),
}


def _op(summary: str, body: str | None, result: dict[str, Any], **extra: Any) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {"200": result, **ERRORS}}
    if body:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(body)}},
        }
    op.update(extra)
    return op


def document(config: ServeConfig) -> dict[str, Any]:
    api = config.api
    source = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "description": "The number [n] cites it by"},
            "collection": {"enum": ["docs", "code", "issues"]},
            "repo": {"type": "string", "description": "Its repository (only of several)"},
            "path": {"type": ["string", "null"]},
            "start_line": {"type": ["integer", "null"]},
            "end_line": {"type": ["integer", "null"]},
            "issue": {"type": ["integer", "null"]},
            "title": {"type": "string"},
            "url": {"type": "string", "description": "Permalink pinned to the indexed commit"},
            "score": {"type": "number"},
            "text": {"type": "string", "description": "The chunk's text as indexed"},
            "passages": {
                "type": "array",
                "description": "Further chunks of the same file or thread that fit the question "
                "(retrieval.passages), or the chunk right after a thin one or after the first "
                "source's own (retrieval.thin_lines, read_on_first); "
                "absent when none",
                "items": {
                    "type": "object",
                    "properties": {
                        "title": {"type": "string"},
                        "start_line": {"type": ["integer", "null"]},
                        "end_line": {"type": ["integer", "null"]},
                        "url": {"type": "string", "description": "Permalink to its lines"},
                        "text": {"type": "string"},
                    },
                },
            },
        },
    }
    answer = {
        "type": "object",
        "description": "As `repo-expert ask --json` prints it, with conversation and turn.",
        "properties": {
            "answer": {"type": "string", "description": "Text with [n] markers"},
            "sources": {"type": "array", "items": _ref("Source")},
            "commit": {"type": ["string", "null"]},
            "backend": {"type": "string"},
            "note": {"type": "string"},
            "no_answer": {"type": "boolean"},
            "unsupported": {"type": "array", "items": {"type": "string"}},
            "instance": {"type": "string"},
            "conversation": {"type": "string", "description": "Pass it back to follow up"},
            "turn": {"type": "integer", "description": "Give feedback on it"},
        },
    }
    question = {"type": "string", "maxLength": api.max_question_chars}
    schemas = {
        "Error": {
            "type": "object",
            "properties": {
                "error": {
                    "type": "object",
                    "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                }
            },
        },
        "Source": source,
        "Answer": answer,
        "Instance": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "description": {"type": "string"},
                "repository": {"type": ["string", "null"]},
                "indexed": {"type": "boolean"},
                "commit": {"type": ["string", "null"]},
                "built_at": {"type": ["number", "null"]},
                "repos": {
                    "type": "array",
                    "description": "An instance over several repositories: each one's name, "
                    "repository and commit",
                    "items": {"type": "object"},
                },
                "scopes": {
                    "type": "object",
                    "description": "Named groups of its repositories (a repo filter takes them)",
                    "additionalProperties": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
        "SearchRequest": {
            "type": "object",
            "required": ["instance", "query"],
            "additionalProperties": False,
            "properties": {
                "instance": {"type": "string"},
                "query": question,
                "k": {"type": "integer", "minimum": 1, "maximum": api.max_k},
                "collection": {"enum": ["docs", "code", "issues"]},
                "repo": {
                    "type": "string",
                    "description": "Only this repository or scope (of several)",
                },
            },
        },
        "AskRequest": {
            "type": "object",
            "required": ["instance", "question"],
            "additionalProperties": False,
            "properties": {
                "instance": {"type": "string"},
                "question": question,
                "conversation": {
                    "type": "string",
                    "pattern": "^[A-Za-z0-9_-]{8,64}$",
                    "description": "From a previous answer: ask a follow-up",
                },
                "repo": {
                    "type": "string",
                    "description": "Only this repository or scope (of several; 'all': every one)",
                },
                "default_repo": {
                    "type": "string",
                    "description": "The same as a chat channel's default (the web page's Search "
                    "in): unless the question says repo:NAME, or follows up a turn that did",
                },
                "stream": {
                    "type": "boolean",
                    "description": "Answer as server-sent events: "
                    "`text` {text: reply so far} while a model writes, then `answer` "
                    "(the checked Answer) or `error`",
                },
            },
        },
        "FeedbackRequest": {
            "type": "object",
            "required": ["turn", "verdict"],
            "additionalProperties": False,
            "properties": {"turn": {"type": "integer"}, "verdict": {"enum": ["up", "down"]}},
        },
    }
    key: list[dict[str, list[str]]] = [{"apiKey": []}] if api.keys else []
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "repo-expert",
            "version": "1",
            "description": "Questions about code repositories, answered with numbered sources "
            f"pinned to the indexed commit. Bodies up to {api.max_body_bytes} bytes.",
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer"}},
        },
        "security": key,
        "paths": {
            "/healthz": {
                "get": _op("Liveness", None, _json({"type": "object"}, "OK"), security=[])
            },
            "/readyz": {
                "get": _op(
                    "Readiness: instances loaded, stores reachable (503 with the problems)",
                    None,
                    _json({"type": "object"}, "ready"),
                    security=[],
                )
            },
            "/metrics": {"get": _op("Prometheus metrics", None, {"description": "text/plain"})},
            "/v1/instances": {
                "get": _op(
                    "The instances this caller may use",
                    None,
                    _json(
                        {
                            "type": "object",
                            "properties": {
                                "instances": {"type": "array", "items": _ref("Instance")}
                            },
                        },
                        "Instances",
                    ),
                )
            },
            "/v1/search": {
                "post": _op(
                    "Sources for a query (no answer)",
                    "SearchRequest",
                    _json(
                        {
                            "type": "object",
                            "properties": {
                                "instance": {"type": "string"},
                                "commit": {"type": ["string", "null"]},
                                "sources": {"type": "array", "items": _ref("Source")},
                                "narrowed": {
                                    "type": "object",
                                    "description": "An instance over several repositories: the "
                                    "query names this one, whose source led, so it was searched "
                                    "alone (add repo:all to the query to search beyond it)",
                                    "properties": {
                                        "repo": {"type": "string"},
                                        "why": {"type": "string"},
                                    },
                                },
                            },
                        },
                        "Sources",
                    ),
                )
            },
            "/v1/ask": {
                "post": _op(
                    "Answer a question, citing numbered sources",
                    "AskRequest",
                    {
                        "description": "The answer (JSON), or with stream: text/event-stream",
                        "content": {
                            "application/json": {"schema": _ref("Answer")},
                            "text/event-stream": {"schema": {"type": "string"}},
                        },
                    },
                    parameters=[
                        {
                            "name": "X-Repo-Expert-Client",
                            "in": "header",
                            "required": False,
                            "schema": {"enum": ["web"]},
                            "description": "web: recorded as the web page's",
                        }
                    ],
                )
            },
            "/v1/feedback": {
                "post": _op(
                    "👍 or 👎 on an answer",
                    "FeedbackRequest",
                    _json({"type": "object"}, "Recorded"),
                )
            },
        },
    }
