"""The chat models of one turn: built for the request (in its event loop), tried in order by
the failover middleware, and closed when the turn ends."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
from langchain_core.language_models import BaseChatModel

from aircoach.tools.registry import ToolSpec
from aircoach.turn.failover import ModelFailover
from aircoach.turn.providers import ModelProvider, aclose_model, model_label

# Closing a model's HTTP client is quick; a broken one must not hold the response open.
_CLOSE_TIMEOUT_S = 2.0


@dataclass
class TurnModels:
    models: list[BaseChatModel]
    failover: ModelFailover

    @classmethod
    async def open(
        cls, provider: ModelProvider, tools: list[ToolSpec], *, streamed: bool = True
    ) -> TurnModels:
        """`streamed`: the client reads the answer as it is written (see `ModelFailover`)."""
        models = await provider.models_for(tools)
        return cls(models, ModelFailover(models[1:], streamed=streamed))

    @property
    def primary(self) -> BaseChatModel:
        return self.models[0]

    @property
    def label(self) -> str:
        """The model that answered, or the primary one while none has."""
        return self.failover.answered_by or model_label(self.primary)

    async def aclose(self) -> None:
        """Close every model's clients, even while the turn is being cancelled."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT_S):
            for model in self.models:
                await aclose_model(model)
