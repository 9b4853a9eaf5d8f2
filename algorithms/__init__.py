"""Training methods built only on pycomm's public API: data-parallel algorithms as one-line wrappers
around a torch optimizer, ZeRO sharding (zero/), Hogwild LAP-SGD (lap/), parameter servers and
bounded staleness (ps/), and pipeline model parallelism (pipeline/, a model wrapper):

    opt = algorithms.CommOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), algorithm="plsgd",
                                   comm=None, model=model, averaging_freq=8)

`available()` lists every algorithm with its options and defaults. An algorithm module registers its
class with `@algorithms.register("name")`; importing the module below makes the name selectable. `lookup(name)` is the class, whose `training` and
`state_layout` (algorithms/traits.py) say how to drive it and how to checkpoint it.
`Pipeline` (pipeline model parallelism) is a model wrapper, not an optimizer wrapper: it declares the
same traits (training="pipeline") but is not in the CommOptimizer registry. Every one of them takes its
ranks from a pycomm.Mesh (`mesh=`); which pairs compose: algorithms/composition.py."""

from __future__ import annotations

from algorithms import traits
from algorithms.base import CommOptimizer
from algorithms.composition import CompositionError
from algorithms.diloco import DiLoCo
from algorithms.easgd import EASGD, EASGDPlus
from algorithms.lapsgd import LAPSGD, LPPSGD
from algorithms.lars import LARS
from algorithms.lsgd import LSGD, LSGDPlus
from algorithms.mbsgd import MBSGD
from algorithms.options import OptionError
from algorithms.pipeline import Pipeline
from algorithms.plsgd import PLSGD
from algorithms.ps import SSP, AsyncPS, SyncPS
from algorithms.qsr import QSR
from algorithms.registry import available, lookup, register
from algorithms.schedules import Constant, CosineWithWarmup, MultiStep
from algorithms.zero import ZeRO1, ZeRO2, ZeRO3

__all__ = [
    "CommOptimizer",
    "CompositionError",
    "available",
    "lookup",
    "register",
    "traits",
    "OptionError",
    "LARS",
    "CosineWithWarmup",
    "MultiStep",
    "Constant",
    "MBSGD",
    "PLSGD",
    "QSR",
    "EASGD",
    "EASGDPlus",
    "LSGD",
    "LSGDPlus",
    "LAPSGD",
    "LPPSGD",
    "DiLoCo",
    "ZeRO1",
    "ZeRO2",
    "ZeRO3",
    "Pipeline",
    "AsyncPS",
    "SyncPS",
    "SSP",
]
