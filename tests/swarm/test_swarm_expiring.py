"""`fetch.expiring.ExpiringMap`: what the gatherer remembers of settled pointers, bounded in size and in time."""

from __future__ import annotations

import pytest

from ftis_swarm.swarm.fetch.expiring import ExpiringMap


def test_entries_end_in_insertion_order_and_the_oldest_go_first_for_room():
    m: ExpiringMap[str, int] = ExpiringMap(3)
    for i, until in enumerate([10.0, 20.0, 30.0]):
        m.put(f"k{i}", i, until)
    m.expire(15.0)
    assert "k0" not in m and m.get("k1") == 1 and len(m) == 2
    m.put("k3", 3, 40.0)
    m.put("k4", 4, 50.0)  # past 3: the oldest insertion (k1) goes
    assert "k1" not in m and [m.get(k) for k in ("k2", "k3", "k4")] == [2, 3, 4] and m.evicted == 1
    m.put("k2", 22, 60.0)  # put again: it moves to the end with its new end
    m.expire(45.0)
    assert "k3" not in m and "k4" in m and m.get("k2") == 22
    assert m.pop("k4") == 4 and m.pop("k4") is None


def test_a_flood_of_keys_is_held_to_its_bound_and_each_expiry_is_constant_work():
    m: ExpiringMap[int, None] = ExpiringMap(1000)
    for i in range(200_000):
        m.put(i, None, float(i))
    assert len(m) == 1000 and m.evicted == 199_000
    m.expire(199_500.0)
    assert len(m) == 500 and 199_499 not in m and 199_500 in m


def test_a_size_below_one_is_refused():
    with pytest.raises(ValueError, match="positive"):
        ExpiringMap(0)
