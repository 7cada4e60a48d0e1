"""The client shape of a search tool's result, shared by every search backend."""

from __future__ import annotations

import json

from aircoach.tools.registry import ResultFormat
from aircoach.tools.results import failure_data, result_items, success_data

META = {"latency_ms": 3, "source": "kb_search", "endpoint": "${KB_SEARCH_URL}", "attempts": 1}


def test_items_are_the_kept_results_each_field_capped():
    fmt = ResultFormat(max_results=2, max_chars=10, max_chars_by_field={"testo": 20})
    body = {
        "results": [
            {"testo": "t" * 50, "id": "i" * 50, "score": 0.5, "tags": ["x" * 50], "n": None},
            {"testo": "breve"},
            {"testo": "terzo"},
        ],
        "raw": "x" * 100_000,
    }
    data = success_data(result_items(body, fmt), META, fmt)
    assert data == {
        "success": True,
        "items": [
            {"testo": "t" * 19 + "…", "id": "i" * 9 + "…", "score": 0.5, "tags": ["x" * 9 + "…"]},
            {"testo": "breve"},
        ],
        "meta": META,
    }


def test_one_document_answer_is_one_item_and_a_cap_drops_items_from_the_end():
    fmt = ResultFormat()
    assert result_items({"text": "Art. 1", "meta": {}}, fmt) == [{"text": "Art. 1"}]
    assert result_items({"results": []}, fmt) == []
    items = [{"text": "y" * 400} for _ in range(8)]
    data = success_data(items, META, fmt, max_bytes=2000)
    assert len(json.dumps(data).encode()) <= 2000
    assert len(data["items"]) + data["meta"]["dropped"] == 8 and data["items"]


def test_a_failure_says_what_failed_in_a_few_words():
    data = failure_data("HTTP 503" + "!" * 1000, META)
    assert data["success"] is False and data["meta"] == META and len(data["error"]) <= 300
