"""Checks of what a publish answer (`tests/swarm/node_proc.py`) says it waited for."""

from __future__ import annotations


def assert_steps(answer: dict, *, wait: str) -> None:
    """`PublishResult.steps` of a publish answer: each step of what `wait` waits for, in order, none
    negative, their sum within the call's time, one RSA signature and its check at least."""
    steps = answer["steps"]
    waited = ["nearest", "first_store", "local_store"] if wait == "stored" else []
    assert answer["wait"] == wait
    assert list(steps) == ["encode", "loop", "sign", "check", "gossip", *waited, "hand_back"], steps
    assert all(seconds >= 0.0 for seconds in steps.values()), steps
    assert 0.0 < sum(steps.values()) <= answer["seconds"], (steps, answer["seconds"])
    assert steps["sign"] > 0.0 and steps["check"] > 0.0
