"""The lab: what measures the product, never a part of it. Imported by `cli` alone.

- experiment/   the paper's comparison in miniature: arms, runs, the held-out evaluator,
                fixed statistics, paired tests, the report and the pilot gate
- bench/        the benchmarks behind `ftis-node bench ...`, each against a baseline in the same run
- hostile/      a hostile peer with daemons and keys of its own, and the hostile groups it sends

Imports below it: every layer (ops, node and theirs). hivemind only in `lab.hostile` (the
benches reach it through `swarm`); scipy and matplotlib only in `lab.experiment` (and
`ops.report`).
"""
