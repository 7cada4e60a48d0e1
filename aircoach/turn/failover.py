"""Model failover: a second model answers when the first fails before any of its text reached
the user; a final failure becomes `ModelUnavailable`.

LangChain's `with_fallbacks` cannot be used (the agent needs `bind_tools`) and its
`ModelFallbackMiddleware` retries even after the first model streamed half an answer, which
would reach the client as two answers glued together. Here a callback, installed for the
duration of each attempt through a context variable, records whether the model streamed any
text; only an attempt that streamed nothing is retried on the next model. In a JSON turn no
text reaches the user before the turn ends, so any failed attempt is retried.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any

from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.tracers.context import register_configure_hook
from langgraph.errors import GraphBubbleUp

from aircoach.errors import ModelUnavailable
from aircoach.turn.providers import model_label

log = logging.getLogger(__name__)


class EmptyModelReply(Exception):
    """The model answered with neither text nor a tool call."""


class _TextWatch(BaseCallbackHandler):
    """Notes whether a model run streamed any text (what the client would already have seen)."""

    run_inline = True  # set the flag before the next chunk, not later on an executor

    def __init__(self) -> None:
        self.streamed = False

    def on_llm_new_token(self, token: str | list[str | dict[str, Any]], **kwargs: Any) -> None:
        if token:
            self.streamed = True


_watch: ContextVar[_TextWatch | None] = ContextVar("aircoach_text_watch", default=None)
# Every callback manager configured while `_watch` holds a handler gets that handler: the model
# call inside the agent's model node inherits it without any change to how the node calls it.
register_configure_hook(_watch, inheritable=True)


@contextmanager
def _watching() -> Iterator[_TextWatch]:
    watch = _TextWatch()
    token = _watch.set(watch)
    try:
        yield watch
    finally:
        _watch.reset(token)


def _is_empty(response: ModelResponse) -> bool:
    replies = [m for m in response.result if isinstance(m, AIMessage)]
    return not any(m.text.strip() or m.tool_calls for m in replies)


class ModelFailover:
    """One turn's model calls: try the models in order. Sticky within a turn: once a model
    failed, the turn's later model calls (after a tool) go straight to the model that
    answered. Called by the turn's middleware around each model call.

    `streamed`: the client reads the text as it is written (SSE). A JSON turn's client reads
    nothing before the turn ends, and the turn keeps only the text of model calls that ended,
    so there a model that failed half-way through its text is retried on the next one too."""

    def __init__(self, fallbacks: Sequence[BaseChatModel] = (), *, streamed: bool = True):
        self.fallbacks = list(fallbacks)
        self.streamed = streamed
        self.answered_by: str | None = None
        self._first = 0

    async def call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        models = [request.model, *self.fallbacks]
        for index in range(self._first, len(models)):
            model = models[index]
            attempt = request if index == 0 else request.override(model=model)
            last = index == len(models) - 1
            # Only a model with another behind it, in a turn the client reads as it streams,
            # needs watching (whether it streamed text decides the retry): the callback costs
            # every streamed chunk a dispatch.
            watched = self.streamed and not last
            with _watching() if watched else nullcontext() as watch:
                try:
                    response = await handler(attempt)
                    if _is_empty(response):
                        raise EmptyModelReply(f"{model_label(model)!r} returned an empty reply")
                except GraphBubbleUp:
                    raise
                except Exception as exc:
                    # Text the client already read: a second answer would be glued to it.
                    seen = watch is not None and watch.streamed
                    log.warning(
                        "model %r failed (%s: %s)%s",
                        model_label(model),
                        type(exc).__name__,
                        exc,
                        "" if last or seen else "; trying the fallback model",
                    )
                    if last or seen:
                        raise _unavailable(exc) from exc
                    continue
            self._first = index
            self.answered_by = model_label(model)
            return response
        raise AssertionError("unreachable: the last model either answers or raises")


def _unavailable(exc: Exception) -> ModelUnavailable:
    if isinstance(exc, EmptyModelReply):
        return ModelUnavailable("model_empty_answer")
    return ModelUnavailable()
