"""The collector pause around a unit (lakemv.core.runtime.collector)."""

from __future__ import annotations

import gc

import pytest

from lakemv.core.runtime.collector import paused


def test_the_collector_is_off_in_a_unit_and_back_after_it_even_when_the_unit_fails():
    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
        with paused():  # a nested pause leaves it to the outer one
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), paused():
        raise RuntimeError("a failed unit")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    try:
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
