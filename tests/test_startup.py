"""The entries build their app, and the first chat imports the turn, with the cyclic GC
paused (aircoach/startup.py)."""

from __future__ import annotations

import gc
import importlib
import sys

import pytest

from aircoach.startup import YOUNG_THRESHOLD, first_import, starting


def test_the_collector_is_paused_inside_then_on_again_with_what_was_built_frozen():
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with starting():
        assert not gc.isenabled()
        built = [[index] for index in range(100)]  # lists: objects the collector tracks
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen + len(built)


def test_an_error_while_starting_still_turns_the_collector_back_on():
    with pytest.raises(RuntimeError), starting():
        raise RuntimeError("the app did not build")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    try:
        with starting():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_first_import_runs_with_the_collector_paused_and_is_frozen(tmp_path, monkeypatch):
    (tmp_path / "heavy_for_startup_test.py").write_text(
        "import gc\nCOLLECTOR_ON = gc.isenabled()\nBUILT = [[n] for n in range(100)]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "heavy_for_startup_test", raising=False)
    frozen = gc.get_freeze_count()
    first_import("heavy_for_startup_test")
    module = sys.modules["heavy_for_startup_test"]
    assert module.COLLECTOR_ON is False
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen + len(module.BUILT)


def test_a_module_already_imported_is_not_imported_again_nor_frozen(monkeypatch):
    """Watched on the calls: the freeze count it compared moves on its own (an object frozen
    at start that another thread frees meanwhile lowers it; it failed once in a few runs)."""
    calls: list[str] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(importlib, "import_module", lambda name, *_: calls.append(name))
    first_import("json")  # imported long ago
    assert calls == []
    assert gc.isenabled()


def test_after_starting_the_young_generation_is_collected_every_2000_allocations():
    """CPython 3.13's default, not 3.11's and 3.12's 700 (at which nearly every turn paid a
    collection); a process that chose another threshold keeps it."""
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with starting():
            pass
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10) == (2000, 10, 10)
        gc.set_threshold(50_000, 20, 20)
        with starting():
            pass
        assert gc.get_threshold() == (50_000, 20, 20)
    finally:
        gc.set_threshold(*before)
