"""A stored turn sent again (a repeated `client_message_id` once the turn's log is gone or
when the turn did not end `ok`, a rejoin after its log expired, a JSON replay): the events and
JSON a client got the first time, built from the client data only (never a tool's `text`),
without running the model.

The citation guard's stored verdict comes back with it (the `grounding` event, and the caveat
after it when a citation is unverified and `GROUNDING_CAVEAT` is on), so that a retried answer
never shows a citation without the warning the first one had. A turn that did not end `ok`
never passes for a whole answer: its replay carries an `error` event (`turn_incomplete`) before
`done`, whose `status` is the stored one. The client sends the question again, with a new
`client_message_id`, for a new answer."""

from __future__ import annotations

from aircoach.errors import TurnIncomplete
from aircoach.grounding.guard import caveat
from aircoach.logs import current_request_id
from aircoach.messages import DEFAULT_LANGUAGE, Language
from aircoach.turn.events import AgentMessage, Done, ErrorEvent, Grounding, ToolResult, TurnEvent
from aircoach.turn.log import LoggedEvent
from aircoach.turn.records import Turn


def replayed_events(
    turn: Turn, language: Language = DEFAULT_LANGUAGE, *, caveats: bool
) -> list[LoggedEvent]:
    """`tool_result`s, the answer in one `agent_message`, the guard's `grounding` (and, with
    `caveats`, the caveat's `agent_message` for an unverified citation), an `error` if the
    turn did not end `ok`, then `done` (`context_turns` is not stored: 0), numbered from 1."""
    events: list[TurnEvent] = []
    calls = turn.tools
    for n, call in enumerate(calls):
        # Only a return_direct tool that ended the turn leaves no text after it.
        final = n == len(calls) - 1 and not turn.system and call.status == "success"
        events.append(
            ToolResult(
                tool_name=call.tool_name, arguments=call.arguments, data=call.data, final=final
            )
        )
    if turn.system:
        events.append(AgentMessage(content=turn.system))
    if turn.grounding is not None:
        events.append(Grounding(**turn.grounding.model_dump()))
        if note := replayed_caveat(turn, caveats=caveats):
            events.append(AgentMessage(content=note))
    for error in replayed_errors(turn, language):
        events.append(ErrorEvent(code=error["code"], message=error["message"]))
    events.append(
        Done(
            status=turn.status,
            turn_id=turn.turn_id,
            prompt_version=turn.prompt_version,
            model=turn.model,
            context_turns=0,
            request_id=current_request_id() or "",
        )
    )
    return [LoggedEvent(n, event.model_dump(mode="json")) for n, event in enumerate(events, 1)]


def replayed_errors(turn: Turn, language: Language = DEFAULT_LANGUAGE) -> list[dict[str, str]]:
    """The `errors` of a stored turn's JSON answer: `turn_incomplete` unless it ended `ok`."""
    if turn.status == "ok":
        return []
    error = TurnIncomplete()
    return [{"code": error.code, "message": error.message_in(language)}]


def replayed_caveat(turn: Turn, *, caveats: bool) -> str:
    """The note sent after the stored answer the first time: "" unless a citation was
    unverified and `caveats` (GROUNDING_CAVEAT) is on."""
    if not caveats or turn.grounding is None or not turn.grounding.unverified:
        return ""
    return caveat(turn.grounding)
