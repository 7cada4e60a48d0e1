"""The base of every shape the API sends: response bodies, stream events, records as returned."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ResponseModel(BaseModel):
    """A shape the API sends, always dumped whole (never with `exclude_none` or
    `exclude_unset`): a field with a default is in every body, so the serialization schema
    (the OpenAPI document's response side) lists it as required, and a client generated from
    it needs no `undefined` check. A field that may be left out of a body says so with
    `Field(exclude_if=...)`, which keeps it optional there. Request bodies are plain
    `BaseModel`s: a client may omit a field that has a default."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)
