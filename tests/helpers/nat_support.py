"""Building the NAT testbed in a test: it runs under CI, and says why it cannot elsewhere."""

from __future__ import annotations

import os

import pytest

from ftis_swarm.lab.bench.nat_testbed import NatTestbed, unavailable_reason


def nat_testbed(**options) -> NatTestbed:
    """A fresh testbed (`options`: NatTestbed.create's, e.g. `forward_port` for the control home3); without
    root or iptables a failure under CI=true, a skip with the reason elsewhere."""
    reason = unavailable_reason()
    if reason:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}; CI must run the NAT tests (run CI as root)")
        pytest.skip(reason)
    return NatTestbed.create(**options)
