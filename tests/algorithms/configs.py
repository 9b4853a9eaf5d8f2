"""Configurations that the rule tests run on real ranks and in the simulation."""

from __future__ import annotations

from typing import Any

STEPS = 12

# SDTL's own rules (EASGD+'s restarted centre, LSGD's proxy score), also run on 3 ranks (local pulling on)
SDTL_RULES_ON_THREE = ["easgd+", "lsgd-proxy-pull"]

# id -> (algorithm, options, inner optimizer, batchnorm, lr schedule)
RULES: dict[str, tuple[str, dict[str, Any], str, bool, bool]] = {
    "mbsgd-momentum": ("mbsgd", {"bucket_bytes": 200}, "momentum", False, False),
    "mbsgd-lars": ("mbsgd", {}, "lars", False, False),
    "plsgd-bn": ("plsgd", {"averaging_freq": 3, "pre_post_steps": 2}, "momentum", True, False),
    "qsr-sgd": ("qsr", {"h_base": 2, "alpha": 0.2, "h_min": 2, "total_steps": STEPS}, "momentum", False, True),
    "qsr-adamw": (
        "qsr",
        {"h_base": 2, "alpha": 0.02, "h_min": 1, "warmup_steps": 3, "avg_m": True, "avg_v": True},
        "adamw",
        False,
        True,
    ),
    "easgd": (
        "easgd",
        {"comm_period": 3, "dist_pulling_strength": 0.6, "local_pulling_strength": 0.3},
        "momentum",
        False,
        False,
    ),
    "easgd+": (
        "easgd+",
        {"comm_period": 3, "dist_pulling_strength": 0.4, "local_pulling_strength": 0.2},
        "momentum",
        False,
        False,
    ),
    "lsgd-loss": (
        "lsgd",
        {"comm_period": 3, "dist_pulling_strength": 0.5, "local_pulling_strength": 0.3, "leader_window": 4},
        "momentum",
        False,
        False,
    ),
    "lsgd-proxy": (
        "lsgd",
        {
            "comm_period": 2,
            "dist_pulling_strength": 0.5,
            "leader_metric": "proxy",
            "local_pulling_strength": 0.0,
            "leader_window": 3,
        },
        "sgd",
        False,
        False,
    ),
    "lsgd-proxy-pull": (
        "lsgd",
        {"comm_period": 3, "dist_pulling_strength": 0.4, "leader_metric": "proxy", "local_pulling_strength": 0.3},
        "momentum",
        False,
        False,
    ),
    "lsgd-multi": (
        "lsgd",
        {
            "comm_period": 2,
            "dist_pulling_strength": 0.3,
            "multi_leader": True,
            "global_period": 3,
            "global_pulling_strength": 0.2,
            "local_pulling_strength": 0.2,
        },
        "momentum",
        False,
        False,
    ),
    "lsgd+": (
        "lsgd+",
        {"comm_period": 3, "dist_pulling_strength": 0.5, "local_pulling_strength": 0.3},
        "momentum",
        False,
        False,
    ),
    # DiLoCo with its defaults (outer SGD lr 0.7, Nesterov momentum 0.9) around AdamW
    "diloco-adamw": ("diloco", {"inner_steps": 3}, "adamw", False, False),
    # streaming: 2 fragments over the 3 layers (Linear, BatchNorm, Linear), rounds of fragment 1 at t = 2 mod 4,
    # applied 2 steps later (in flight across the resume test's cut), mixed half-half
    "diloco-stream": (
        "diloco",
        {"inner_steps": 4, "fragments": 2, "sync_delay": 2, "mixing": 0.5, "outer_lr": 0.5, "outer_momentum": 0.8},
        "momentum",
        True,
        False,
    ),
    # QSR's period per fragment from the decaying rate, another outer optimizer
    "diloco-qsr": (
        "diloco",
        {
            "inner_steps": "qsr",
            "h_base": 2,
            "alpha": 0.2,
            "h_min": 2,
            "total_steps": STEPS,
            "fragments": 2,
            "sync_delay": 1,
            "outer_optimizer": "Adam",
            "outer_lr": 0.05,
        },
        "momentum",
        False,
        True,
    ),
}
