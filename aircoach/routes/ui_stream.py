"""The turn's events as the Vercel AI SDK's UI message stream (protocol v1), beside our own
SSE (`aircoach.routes.sse`): the same typed events of the same turn, another encoding.

Each chunk is one SSE `data:` line of JSON, the stream ends with `data: [DONE]`:
`start` (the message id: the turn's id) and `start-step`; the answer as
`text-start`/`text-delta`/`text-end` (a new text part after each tool's result); a tool's
result as `tool-input-available` + `tool-output-available` (the part `tool-<name>`, its
output the client data of `tool_result`, never what only the model was given), and a
grading's `progresso` (the student's progress after it) also as a `data-progress` part; the
grounding verdict as a `data-grounding` part, with the guard's caveat in its `caveat` (never in
the text parts, which are exactly the stored answer); `done` as the message metadata
(`turn_id`, `prompt_version`, `model`, `context_turns`, `status`, `request_id`), `finish-step`
and `finish` (`finishReason` `stop` when the turn's `status` is `ok`, even after an error such
as `persist_failed`; `error` when it is `error`), or, for a turn stopped before its end
(`cancelled`, `interrupted`), `abort` (`reason`: that status) in place of `finish`, as the AI
SDK's own `streamText` ends a stream its abort signal stopped; each `error` event as an `error`
chunk after that end.

Errors come last because the AI SDK's `useChat` stops reading at an `error` chunk (its
`onError` throws): one sent where it happened would cut off the rest of the message, the
fallback answer that follows a model's failure, the metadata and the finish.
"""

from __future__ import annotations

import json
from typing import Any

from aircoach.routes.sse import Encoder
from aircoach.turn.log import LoggedEvent

UI_STREAM_HEADER = "x-vercel-ai-ui-message-stream"
UI_STREAM_VERSION = "v1"
_DONE = b"data: [DONE]\n\n"
# `done` fields a client reads from the message's metadata.
METADATA_FIELDS = ("turn_id", "prompt_version", "model", "context_turns", "status", "request_id")
# `done` statuses of a turn stopped before its end (by a newer message, a cancel, or its
# instance going away) rather than failed: the stream ends with `abort`, not `finish`.
STOPPED = ("cancelled", "interrupted")


def _chunk(data: dict[str, Any]) -> bytes:
    return (
        b"data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
    )


class _Message:
    """The state of one assistant message being encoded: whether a text part is open."""

    def __init__(self, message_id: str):
        self.message_id = message_id
        self.text_id: str | None = None
        self.parts = 0
        # The grounding verdict, held until the next event: a caveat that follows it goes into
        # its data part, so that the text parts are exactly the answer that is stored.
        self.verdict: dict[str, Any] | None = None
        # `error` chunks, held until the message has finished (see the module's docstring).
        self.errors: list[dict[str, Any]] = []

    def start(self) -> list[dict[str, Any]]:
        return [{"type": "start", "messageId": self.message_id}, {"type": "start-step"}]

    def _close_text(self) -> list[dict[str, Any]]:
        if self.text_id is None:
            return []
        closed, self.text_id = self.text_id, None
        return [{"type": "text-end", "id": closed}]

    def _next_id(self, kind: str) -> str:
        self.parts += 1
        return f"{self.message_id}-{kind}-{self.parts}"

    def encode(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        if self.verdict is not None:
            if data["type"] == "agent_message":  # the guard's caveat, right after its verdict
                return self._grounding(caveat=data["content"])
            return [*self._grounding(), *self._encode(data)]
        return self._encode(data)

    def flush(self) -> list[dict[str, Any]]:
        """What is still held when the stream ends."""
        held = self._grounding() if self.verdict is not None else []
        held.extend(self.errors)
        self.errors = []
        return held

    def _grounding(self, caveat: str | None = None) -> list[dict[str, Any]]:
        verdict, self.verdict = self.verdict or {}, None
        if caveat is not None:
            verdict = {**verdict, "caveat": caveat}
        return [{"type": "data-grounding", "id": self._next_id("grounding"), "data": verdict}]

    def _progress(self, output: dict[str, Any]) -> list[dict[str, Any]]:
        """A grading's `progresso` (the student's progress after it) as its own data part."""
        progress = output.get("progresso")
        if not isinstance(progress, dict):
            return []
        return [{"type": "data-progress", "id": self._next_id("progress"), "data": progress}]

    def _encode(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        kind = data["type"]
        if kind == "agent_message":
            chunks: list[dict[str, Any]] = []
            if self.text_id is None:
                self.text_id = self._next_id("text")
                chunks.append({"type": "text-start", "id": self.text_id})
            chunks.append({"type": "text-delta", "id": self.text_id, "delta": data["content"]})
            return chunks
        if kind == "tool_result":
            call_id = self._next_id("tool")
            name = data["tool_name"]
            return [
                *self._close_text(),
                {
                    "type": "tool-input-available",
                    "toolCallId": call_id,
                    "toolName": name,
                    "input": data.get("arguments", {}),
                },
                {"type": "tool-output-available", "toolCallId": call_id, "output": data["data"]},
                *self._progress(data["data"]),
            ]
        if kind == "grounding":
            self.verdict = {k: v for k, v in data.items() if k != "type"}
            return []
        if kind == "error":
            self.errors.append({"type": "error", "errorText": data["message"]})
            return []
        if kind == "done":
            metadata = {name: data[name] for name in METADATA_FIELDS if name in data}
            status = data.get("status")
            if status in STOPPED:
                # Stopped, not failed: what the AI SDK's own streamText sends when its abort
                # signal stops it, an `abort` chunk and no `finish`.
                end = {"type": "abort", "reason": status}
            else:
                # An error the turn ended ok with (its answer whole but not stored) is its
                # own `error` chunk, the message itself finished.
                reason = "stop" if status in (None, "ok") else "error"
                end = {"type": "finish", "finishReason": reason, "messageMetadata": metadata}
            return [
                *self._close_text(),
                {"type": "message-metadata", "messageMetadata": metadata},
                {"type": "finish-step"},
                end,
                *self.flush(),
            ]
        return []  # a type this encoder does not know yet: our SSE still carries it


class UiEncoder:
    """An encoder (`aircoach.routes.sse.Encoder`) of one turn as the UI message stream; the
    assistant message's id is `message_id` (the turn's)."""

    def __init__(self, message_id: str):
        self.message = _Message(message_id)

    def opening(self) -> bytes:
        return b"".join(_chunk(c) for c in self.message.start())

    def event(self, event: LoggedEvent) -> bytes:
        return b"".join(_chunk(c) for c in self.message.encode(event.data))

    def closing(self) -> bytes:
        return b"".join(_chunk(c) for c in self.message.flush()) + _DONE


def ui_encoder(message_id: str) -> Encoder:
    return UiEncoder(message_id)
