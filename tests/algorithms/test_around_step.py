"""The user's code around our step, on 2 real ranks, for every algorithm: gradient clipping after
backward is what step() applies (mbsgd's averaged gradients are final when backward returns),
GradScaler and LR schedulers take the wrapper, which is a torch.optim.Optimizer (no false warning that
the scheduler stepped first; on one rank no bytes counted as communicated); LAP's workers clip too.
Plus SDTL's constructor, as SDTL's scripts call it."""

from __future__ import annotations

import warnings

import pytest
import torch

import algorithms
from tests.algorithms.lap_models import SmallCNN
from tests.algorithms.runs import case
from tests.algorithms.workers.around_step import INDEPENDENT, LOOP_OWNERS, QUIET, SHARDED_GRADS
from tests.launch import mpirun

ALGORITHMS = sorted(QUIET)


@pytest.fixture(autouse=True)
def one_rank_world() -> None:
    """The in-process tests wrap with comm=None: a world of this one process."""
    import pycomm

    pycomm.init()


def test_every_loop_hooking_algorithm_is_covered():
    assert set(algorithms.available()) - LOOP_OWNERS - SHARDED_GRADS - INDEPENDENT <= set(QUIET), (
        "add the new algorithm to around_step.QUIET"
    )


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_clipped_gradients_are_what_step_applies(algorithm):
    for rank, res in enumerate(case("around_step", 2, f"clip-{algorithm}")):
        assert res["grads_after_backward_vs_expected"] < 1e-6, (rank, res)
        assert res["update_vs_lr_times_clipped"] < 1e-7, (rank, res)
        assert res["update_norm"] <= 1e-3 * 1.001 < res["norm_before_clip"], (rank, res)


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_grad_scaler_and_scheduler_take_the_wrapper(algorithm):
    for rank, res in enumerate(case("around_step", 2, f"scaler-{algorithm}")):
        assert res["ok"], (rank, res)


@pytest.mark.parametrize("algorithm", sorted(set(algorithms.available())))
def test_every_wrapper_is_a_torch_optimizer(algorithm):
    if algorithms.lookup(algorithm).training == algorithms.traits.SERVER:  # needs a server and a worker
        assert issubclass(algorithms.lookup(algorithm), torch.optim.Optimizer)  # built in test_ps_rules.py
        return
    model = SmallCNN()
    opt = algorithms.CommOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), algorithm=algorithm, model=model)
    assert isinstance(opt, torch.optim.Optimizer)
    sched = algorithms.CosineWithWarmup(opt, total_steps=10)  # as apps.train schedules: the wrapper itself
    assert sched.optimizer is opt and sched.get_last_lr() == [0.1] * len(opt.param_groups)
    calls = []
    opt.register_step_pre_hook(lambda o, args, kwargs: calls.append("pre"))
    opt.register_step_post_hook(lambda o, args, kwargs: calls.append("post"))
    if type(opt).training != algorithms.traits.WRAPPER:  # trains in its own loop: step() refuses
        assert opt._optimizer_step_pre_hooks and opt._optimizer_step_post_hooks
        return
    loss = model(torch.randn(2, 1, 28, 28)).square().mean()
    loss.backward()
    opt.step(loss=loss)
    assert calls == ["pre", "post"], calls
    with warnings.catch_warnings():  # ZeRO and ssp step an optimizer of their own: no false order warning
        warnings.filterwarnings("error", message=r"Detected call of `lr_scheduler.step\(\)`")
        sched.step()
    assert sched.get_last_lr()[0] < 0.1
    assert opt.comm_stats()["bytes"] == 0, opt.comm_stats()  # one rank: nothing leaves it


@pytest.mark.mpi
def test_lap_workers_clip_their_gradients():
    mpirun(1, "tests.algorithms.workers.lap_clipping", timeout=600)


def test_sdtl_constructor_runs_an_sdtl_loop():
    """SDTL's README line, with only the import changed; its loop passes no loss to step()."""
    model = torch.nn.Linear(4, 2)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4, nesterov=True)
    for name, cls in (("EASGD", algorithms.EASGD), ("LSGD", algorithms.LSGD)):
        opt = algorithms.CommOptimizer(
            sgd,
            dist_optim_name=name,
            world_size=1,
            comm_period=2,
            dist_pulling_strength=0.5,
            local_pulling_strength=0.1,
        )
        assert type(opt) is cls
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()
        assert [c.shape for c in opt.centre()] == [p.shape for p in model.parameters()]
    assert opt.options["leader_metric"] == "proxy"


def test_sdtl_world_size_must_match():
    sgd = torch.optim.SGD(torch.nn.Linear(4, 2).parameters(), lr=0.1)
    with pytest.raises(ValueError, match="world_size=4 .* does not match the communicator's 1 ranks"):
        algorithms.CommOptimizer(sgd, dist_optim_name="EASGD", world_size=4)
    with pytest.raises(TypeError, match="not both"):
        algorithms.CommOptimizer(sgd, algorithm="easgd", dist_optim_name="EASGD")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"comm": "x"}, "comm must be a pycomm.Communicator"),
        ({"model": 5}, "model must be the torch.nn.Module"),
        ({"buffers": 5}, "buffers must be a list of tensors"),
    ],
)
@pytest.mark.parametrize("algorithm", sorted(set(algorithms.available())))
def test_bad_comm_model_buffers_name_the_argument(algorithm, kwargs, message):
    sgd = torch.optim.SGD(torch.nn.Linear(4, 2).parameters(), lr=0.1)
    with pytest.raises(TypeError, match=message):
        algorithms.CommOptimizer(sgd, algorithm=algorithm, **kwargs)


def test_another_models_state_is_refused_at_load():
    def wrapped(features: int):
        model = torch.nn.Linear(features, 2)
        return model, algorithms.CommOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), algorithm="plsgd", model=model
        )

    model, opt = wrapped(4)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    _, other = wrapped(3)
    with pytest.raises(ValueError, match=r"parameter 0 has shape \(2, 4\), the parameter has \(2, 3\)"):
        other.load_state_dict(opt.state_dict())
