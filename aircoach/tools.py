"""Tool specifications and the registry. Pure data: importing this never imports LangChain.

A `ToolSpec` says what a tool is (name, description, JSON Schema parameters, defaults, examples
for the offline model's scoring) and which handler runs it. Handlers are async functions
`handler(ctx: ToolContext, **arguments) -> ToolOutput`.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from aircoach.settings import Settings
from aircoach.store.base import QuizStore


@dataclass(frozen=True)
class ToolContext:
    """What a tool may use while it runs: injected per request, never a module global."""

    settings: Settings
    quiz: QuizStore
    user_id: str


@dataclass(frozen=True)
class ToolOutput:
    """`text` is what the model reads; `data` is the raw result the client gets."""

    text: str
    data: dict[str, Any]
    ok: bool = True


Handler = Callable[..., Awaitable[ToolOutput]]


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]{0,63}$")
    description: str = Field(min_length=1)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    default_enabled: bool = True
    source: bool = False
    return_direct: bool = False
    examples: list[str] = Field(default_factory=list)
    python: str = Field(
        description="Dotted path of the async handler, e.g. 'aircoach.quiz:domanda_teoria'"
    )

    def load_handler(self) -> Handler:
        module_name, _, attr = self.python.partition(":")
        handler = getattr(importlib.import_module(module_name), attr)
        if not callable(handler):
            raise TypeError(f"tool {self.name!r}: {self.python!r} is not callable")
        return handler

    @property
    def available(self) -> bool:
        return True


class ToolRegistry:
    def __init__(self, specs: list[ToolSpec]):
        self.specs: dict[str, ToolSpec] = {spec.name: spec for spec in specs}

    @property
    def names(self) -> list[str]:
        return sorted(self.specs)

    def unknown(self, toggles: Mapping[str, bool] | None) -> list[str]:
        return sorted(set(toggles or {}) - set(self.specs))

    def enabled(self, toggles: Mapping[str, bool] | None) -> list[ToolSpec]:
        """The tools switched on for one request: the client's switches over the defaults."""
        toggles = toggles or {}
        return [
            spec
            for name, spec in sorted(self.specs.items())
            if spec.available and toggles.get(name, spec.default_enabled)
        ]


DOMANDA_TEORIA = ToolSpec(
    name="domanda_teoria",
    description=(
        "Propone una domanda di quiz di teoria (capitoli 1-10) e la mostra direttamente "
        "all'utente. Usalo quando l'utente chiede una domanda, un quiz o un esercizio: "
        "per capitolo, per capitolo e numero, per argomento o cercando un testo."
    ),
    parameters={
        "type": "object",
        "properties": {
            "capitolo": {"type": "integer", "description": "Capitolo, da 1 a 10."},
            "numero": {"type": "integer", "description": "Numero della domanda nel capitolo."},
            "campo": {
                "type": "string",
                "description": "Campo su cui filtrare (argomento, difficolta, capitolo).",
            },
            "valore": {"type": "string", "description": "Valore del campo scelto."},
            "testo": {
                "type": "string",
                "description": "Testo da cercare nelle domande (almeno 3 caratteri).",
            },
        },
    },
    return_direct=True,
    examples=[
        "Dammi una domanda del capitolo 2",
        "Fammi un quiz",
        "Voglio una domanda di teoria",
        "Domanda numero 4 del capitolo 7",
        "Fammi una domanda sul QNH",
        "Cerca una domanda sull'altimetro",
        "Fammi un esercizio difficile",
        "Mettimi alla prova con una domanda",
    ],
    python="aircoach.quiz:domanda_teoria",
)


def builtin_registry() -> ToolRegistry:
    return ToolRegistry([DOMANDA_TEORIA])
