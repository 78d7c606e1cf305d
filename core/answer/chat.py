"""Language-model backends behind one small protocol, on the official SDKs.

    ChatModel.complete(system, messages, on_text=None) -> str
    ├── OpenAIChat      the ``openai`` SDK: OpenAI, Azure, Ollama, vLLM, llama.cpp, LM Studio
    └── AnthropicChat   the ``anthropic`` SDK: the Messages API

Both call the SDK with its own retries off (``max_retries=0``) and retry here, so the policy is
one and visible: HTTP 429, 408/409, 5xx and refused connections are retried ``max_retries``
times, after ``retry_backoff`` seconds doubled each time (a ``Retry-After`` of up to 30 s wins);
a request that takes longer than ``timeout`` is abandoned and not retried (the person is
waiting). Errors are :class:`~core.errors.LLMError` with one line built by us — status, the
server's message cut short — with the API key scrubbed out; the key is never logged.

One SDK client per configured model: a :class:`ChatModel` opens its client on first use and
keeps it (its connection pool with it) for every later request, until :meth:`aclose`; a client
is bound to the event loop it was opened on, so a model used from another loop opens a new one.

Streaming: given ``on_text``, a model is asked for a streamed reply (OpenAI ``stream=True``,
Anthropic ``stream=True``) and ``on_text(text_so_far)`` is awaited as the deltas arrive. A
retried request starts its preview again from the empty string.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from core.answer.base import OnText
from core.answer.citations import clip
from core.config import LLMConfig
from core.errors import ConfigError, LLMError
from core.extras import need

log = logging.getLogger(__name__)

DEFAULT_MODELS = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-4o-mini"}


RETRY_AFTER_CAP = 30.0


class ChatModel(Protocol):
    label: str  # "openai gpt-4o-mini at api.openai.com": safe to show and log

    async def complete(
        self, system: str, messages: list[dict[str, str]], on_text: OnText | None = None
    ) -> str: ...

    async def aclose(self) -> None:
        """Close the SDK client (its connections); the model opens a new one if used again."""
        ...


def scrub(text: str, secret: str | None) -> str:
    """``text`` with the secret, and anything shaped like an API key or bearer token, masked."""
    if secret and len(secret) >= 4:
        text = text.replace(secret, "***")
    text = re.sub(r"\b(sk|sk-ant|sk-proj)-[A-Za-z0-9_\-]{6,}", r"\1-***", text)
    return re.sub(r"(?i)(bearer|x-api-key:?)\s+\S+", r"\1 ***", text)


def _host(base_url: str | None, default: str) -> str:
    if not base_url:
        return default
    parts = urlsplit(base_url)
    host = parts.hostname or base_url
    return f"{host}:{parts.port}" if parts.port else host  # never the user:password@ part


class _SDKChat:
    """The retry loop and error mapping both SDKs share. ``provider`` is also the SDK's module."""

    provider = ""
    default_host = ""

    def __init__(self, cfg: LLMConfig, api_key: str, model: str) -> None:
        self.cfg = cfg
        self.model = model
        self._key = api_key
        self.label = f"{self.provider} {model} at {_host(cfg.base_url, self.default_host)}"
        # a missing SDK fails here, when the answerer is made, naming the extra
        self._module = need(self.provider, "llm", f"llm.provider {self.provider}")
        self._sdk: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _new_client(self) -> Any:
        """A new SDK client for this model (the SDK's own retries off: ours are above)."""
        raise NotImplementedError

    def client(self) -> Any:
        """This model's SDK client: opened once, reused by every request on this event loop."""
        loop = asyncio.get_running_loop()
        if self._sdk is None or self._loop is not loop:
            self._sdk, self._loop = self._new_client(), loop
        return self._sdk

    async def aclose(self) -> None:
        sdk, self._sdk, self._loop = self._sdk, None, None
        if sdk is not None:
            await sdk.close()

    async def _once(
        self, system: str, messages: list[dict[str, str]], on_text: OnText | None = None
    ) -> str:
        raise NotImplementedError

    async def complete(
        self, system: str, messages: list[dict[str, str]], on_text: OnText | None = None
    ) -> str:
        """The model's reply; streamed to ``on_text`` as it comes when given (a preview)."""
        attempt = 0
        while True:
            t = time.perf_counter()
            try:
                # The SDK's own timeout bounds each phase; this bounds the whole request.
                async with asyncio.timeout(self.cfg.timeout + 1.0):
                    text = await self._once(system, messages, on_text)
            except Exception as e:  # mapped below; nothing SDK-shaped leaves this function
                retry, why, after = self._classify(e)
            else:
                if not text.strip():
                    raise LLMError(f"{self.label}: the model sent an empty reply")
                log.info("%s answered in %.1fs", self.label, time.perf_counter() - t)
                return text
            why = scrub(why, self._key)
            if not retry or attempt >= self.cfg.max_retries:
                tries = f" (after {attempt + 1} tries)" if attempt else ""
                log.warning("%s: %s%s", self.label, why, tries)
                raise LLMError(f"{self.label}: {why}{tries}") from None
            delay = after if after is not None else self.cfg.retry_backoff * 2**attempt
            log.warning("%s: %s; retry %d of %d in %.2fs", self.label, why, attempt + 1,
                        self.cfg.max_retries, delay)  # fmt: skip
            await asyncio.sleep(delay)
            attempt += 1

    def _classify(self, e: Exception) -> tuple[bool, str, float | None]:
        """(retry?, one-line reason, server-requested delay) for an exception of either SDK."""
        name = type(e).__name__
        if isinstance(e, TimeoutError) or name == "APITimeoutError":
            return False, f"no reply within {self.cfg.timeout:g}s", None
        status = getattr(e, "status_code", None)
        if isinstance(status, int):
            msg = _server_message(getattr(e, "body", None)) or getattr(e, "message", "")
            why = f"HTTP {status}" + (f": {clip(str(msg), 160)}" if msg else "")
            if status in (401, 403):
                why += " (check llm.api_key)"
            after = _retry_after(getattr(getattr(e, "response", None), "headers", None))
            return status in (408, 409, 429) or status >= 500, why, after
        if name == "APIConnectionError":
            return True, "cannot connect", None
        if name in ("RemoteProtocolError", "ReadError"):  # httpx, while reading a stream
            return True, "the connection broke off", None
        if name == "APIResponseValidationError":
            return False, "the reply is not in the expected format", None
        log.debug("%s: unexpected %s", self.label, name)
        return False, f"unexpected error ({name})", None


def _server_message(body: Any) -> str:
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
        if isinstance(err, str):
            return err
    return ""


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    if not headers:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        v = headers.get(name)
        if v is None:
            continue
        try:
            secs = float(v) * scale
        except ValueError:
            return None  # an HTTP date: use our own backoff
        return max(0.0, min(secs, RETRY_AFTER_CAP))
    return None


class OpenAIChat(_SDKChat):
    provider = "openai"
    default_host = "api.openai.com"

    def _new_client(self) -> Any:
        return self._module.AsyncOpenAI(
            api_key=self._key, base_url=self.cfg.base_url, timeout=self.cfg.timeout, max_retries=0
        )

    async def _once(
        self, system: str, messages: list[dict[str, str]], on_text: OnText | None = None
    ) -> str:
        client = self.client()
        extra: dict[str, Any] = {}
        if self.cfg.temperature is not None:
            extra["temperature"] = self.cfg.temperature
        if on_text is not None:
            parts: list[str] = []
            # (typed as Any: the SDKs' overloads don't resolve with the arguments above)
            stream: Any = await client.chat.completions.create(
                model=self.model,
                messages=[{"role": "system", "content": system}, *messages],
                max_tokens=self.cfg.max_answer_tokens,
                stream=True,
                **extra,
            )
            async for chunk in stream:
                delta = chunk.choices[0].delta.content if chunk.choices else None
                if delta:
                    parts.append(delta)
                    await on_text("".join(parts))
            return "".join(parts)
        resp = await client.chat.completions.create(
            model=self.model,
            messages=[{"role": "system", "content": system}, *messages],
            max_tokens=self.cfg.max_answer_tokens,
            **extra,
        )
        if not resp.choices:
            return ""
        return resp.choices[0].message.content or ""


class AnthropicChat(_SDKChat):
    provider = "anthropic"
    default_host = "api.anthropic.com"

    def _new_client(self) -> Any:
        return self._module.AsyncAnthropic(
            api_key=self._key, base_url=self.cfg.base_url, timeout=self.cfg.timeout, max_retries=0
        )

    async def _once(
        self, system: str, messages: list[dict[str, str]], on_text: OnText | None = None
    ) -> str:
        client = self.client()
        # This SDK has no temperature parameter; the Messages API takes it in the body.
        extra = {} if self.cfg.temperature is None else {"temperature": self.cfg.temperature}
        if on_text is not None:
            parts: list[str] = []
            stream: Any = await client.messages.create(
                model=self.model,
                system=system,
                messages=messages,
                max_tokens=self.cfg.max_answer_tokens,
                extra_body=extra or None,
                stream=True,
            )
            async for event in stream:
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    parts.append(event.delta.text)
                    await on_text("".join(parts))
            return "".join(parts)
        resp = await client.messages.create(
            model=self.model,
            system=system,
            messages=messages,
            max_tokens=self.cfg.max_answer_tokens,
            extra_body=extra or None,
        )
        return "".join(getattr(b, "text", "") for b in resp.content if b.type == "text")


def resolve_provider(cfg: LLMConfig, env: Mapping[str, str] | None = None) -> str:
    """The provider ``auto`` stands for: anthropic, then openai, by which key is set."""
    env = os.environ if env is None else env
    if cfg.provider != "auto":
        return cfg.provider
    if env.get("ANTHROPIC_API_KEY"):
        return "anthropic"
    if env.get("OPENAI_API_KEY"):
        return "openai"
    return "extractive"


def make_chat(cfg: LLMConfig, env: Mapping[str, str] | None = None) -> ChatModel | None:
    """The configured model, or None for the extractive answerer."""
    env = os.environ if env is None else env
    provider = resolve_provider(cfg, env)
    if provider == "extractive":
        return None
    var = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
    key = cfg.api_key.get_secret_value() if cfg.api_key else env.get(var, "")
    if not key:
        if provider == "openai" and cfg.base_url:
            key = "unused"  # local OpenAI-compatible servers (Ollama, vLLM…) take any key
        else:
            raise ConfigError(
                f"llm.provider is {provider} but there is no API key: set llm.api_key: ${{{var}}} "
                f"(and export {var}), or use provider: extractive"
            )
    model = cfg.model or DEFAULT_MODELS[provider]
    chat: _SDKChat = (AnthropicChat if provider == "anthropic" else OpenAIChat)(cfg, key, model)
    return chat
