"""Algorithm classes declare how they are trained and how their state is held (algorithms/traits.py)."""

from __future__ import annotations

import pytest

import algorithms
from algorithms import traits
from algorithms.base import CommOptimizer


def test_every_registered_class_declares_known_traits():
    for name in algorithms.available():
        cls = algorithms.lookup(name)
        assert cls.training in traits.TRAINING_MODES and cls.state_layout in traits.STATE_LAYOUTS, name
    assert algorithms.lookup("mbsgd").state_layout == traits.IDENTICAL
    assert algorithms.lookup("plsgd").state_layout == traits.PER_RANK
    assert {n for n in algorithms.available() if algorithms.lookup(n).training == traits.OWN_LOOP} == {
        "lapsgd",
        "lppsgd",
    }


@pytest.mark.parametrize("attribute, value", [("training", "optimiser"), ("state_layout", "replicated")])
def test_registering_an_unknown_trait_raises(attribute, value):
    cls = type("Odd", (CommOptimizer,), {attribute: value})
    with pytest.raises(ValueError, match=f"Odd.{attribute} must be one of"):
        algorithms.register("odd-test-only")(cls)
    assert "odd-test-only" not in algorithms.available()
