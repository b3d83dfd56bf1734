"""`bench hostile`'s accounting of trust per phase: bans of honest peers and attackers, from the nodes' ledgers."""

from __future__ import annotations

from ftis_swarm.lab.bench.hostile import HostileBench, PhaseRow, _trust, format_hostile

HONEST = {"node0", "node1", "node2", "boot"}


def test_trust_counts_new_bans_by_side_and_the_attackers_points():
    before = [{"node1": {"bans": 0, "cost": 0.0, "charged": 0}, "evil": {"bans": 1, "cost": 20.0, "charged": 3}},
              {}]
    after = [{"node1": {"bans": 1, "ban_reason": "forgery", "cost": 20.0, "charged": 1},
              "evil": {"bans": 2, "ban_reason": "swarm_hash_mismatch", "cost": 40.0, "charged": 9},
              "filler": {"bans": 0, "ban_reason": "", "cost": 0.0, "charged": 500}},
             {"evil": {"bans": 1, "ban_reason": "swarm_bad_signature", "cost": 30.0, "charged": 4}}]
    trust = _trust(before, after, HONEST)
    assert (trust.honest_bans, trust.attackers_banned) == (1, 2)
    assert trust.attacker_points == 20.0 + 30.0 and trust.attacker_refused == 6 + 500 + 4
    assert trust.ban_reasons == {"forgery": 1, "swarm_hash_mismatch": 1, "swarm_bad_signature": 1}


def _row(attack: str, per_round: float, honest_bans: int = 0, imposed: int = 0) -> PhaseRow:
    return PhaseRow(attack=attack, sent=10, stored=0, from_attacker=0, honest_published=6, honest_delivered=6,
                    honest_per_round=per_round, publish_failures={}, honest_bans=honest_bans, imposed_bans=imposed, attackers_banned=0,
                    attacker_points=0.0, attacker_refused=0, ban_reasons={"forgery": imposed} if imposed else {},
                    rounds=3, over_2x=0, max_round_s=2.1, max_gather_over_s=0.1,
                    peak_mb={"node0": 210.0, "hostile": 900.0})


def test_the_table_prints_honest_groups_per_round_against_the_baseline_and_the_imposed_ban():
    bench = HostileBench(deadline=2.0, groups=1, record_memory=None, storage_bytes=1 << 20, fill=300,
                         baseline_mb={"node0": 200.0}, phases=[_row("baseline", 6.0), _row("fill", 4.5),
                                                              _row("honest_ban", 5.0, 1, 1)])
    lines = format_hostile(bench).splitlines()
    fill = next(line for line in lines if line.split()[0] == "fill").split()
    assert fill[5:8] == ["4.5", "0.75", "0"]  # per round, against the baseline's 6.0, no honest ban
    assert "1 (1 imposed)" in next(line for line in lines if line.split()[0] == "honest_ban")
    assert "causes of all bans: forgery x1" in lines
    assert any(line.split()[:2] == ["node0", "200.0"] and line.endswith("(+10.0)") for line in lines)
