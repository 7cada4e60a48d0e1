"""One chat turn, one job per module: `prepare` (what can still fail with a status), `agent`
(the per-request agent), `chat_models` (the turn's models, built and closed), `stream` (the
agent's stream as `events`), `turn` (the turn itself), `recorder` (storing it), `memory`
(process memory of conversations) and `sse` (the wire format)."""
