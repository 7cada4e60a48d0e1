"""The meta-schema check shared by tool parameters and task outputs (aircoach/json_schema.py)."""

from __future__ import annotations

from aircoach.json_schema import MAX_CHARS, schema_problem


def test_a_valid_schema_has_no_problem_whatever_its_key_order():
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    assert schema_problem(schema) is None
    assert schema_problem(dict(reversed(schema.items()))) is None


def test_a_problem_names_where_and_why():
    problem = schema_problem({"type": "object", "properties": {"q": {"type": "strin"}}})
    assert problem is not None
    assert problem.startswith("properties/q/type: 'strin' is not valid")


def test_a_problem_never_echoes_a_large_schema():
    huge = "x" * 50_000
    problem = schema_problem({"type": "object", "properties": {"q": {"type": huge}}})
    assert problem is not None
    assert problem.startswith("properties/q/type: 'xxx")
    assert len(problem) <= 2 * MAX_CHARS + 10
