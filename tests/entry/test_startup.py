"""The entries build their app with the cyclic GC paused (aircoach/entry/startup.py)."""

from __future__ import annotations

import gc

import pytest

from aircoach.entry.startup import starting


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
