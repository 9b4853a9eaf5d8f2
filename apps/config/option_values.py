"""An algorithm's own checks of its option values, run on the config before any rank starts: by the
config checks for algorithm.options and by the parallel checks for parallel.sharding_options."""

from __future__ import annotations

from typing import Any

from apps.config.schema import Config, epochs_to_steps


def algorithm_option_values(name: str, options: dict[str, Any], cfg: Config) -> dict[str, Any]:
    """The algorithm's own checks of its option values (algorithms.options), without a communicator:
    what CommOptimizer.__init__ checks before it communicates, run on a throwaway instance. Returns the
    options with the algorithm's defaults."""
    from algorithms import options as algo_options
    from algorithms.registry import lookup
    from apps import optim

    cls = lookup(name)
    probe = cls.__new__(cls)
    probe.optimizer = optim.probe_optimizer(cfg.optim)
    config = algo_options.merge(name, cls.default_options(), epochs_to_steps(options, 1))
    config["codec"] = algo_options.codec(config["codec"])
    config["bucket_bytes"] = algo_options.optional_integer("bucket_bytes", config["bucket_bytes"], 1)
    probe._validate(config)
    return config
