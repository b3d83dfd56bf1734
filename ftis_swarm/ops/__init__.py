"""Operations around run directories: what an operator runs beside a node.

- testnet.py   the local testnet: a bootstrap peer and N `ftis-node join` processes
- taught.py    a tiny model taught arith's answer form (Qwen or SmolLM2 vocabulary): benches, `testnet --qwen-peer`
- evaluate.py  `ftis-node eval`: greedy pass@1 of a model, checkpoint or adapter (the node's evaluator, node/heldout.py)
- report.py    `ftis-node report`: plots of run directories
- summary.py   the closing table of run directories (held-out start -> end, what the swarm gave)
- status.py    `ftis-node status`: a node's status document from its run directory or its page

Imports below it: node and every layer under it; imported by `lab` and `cli`.
"""
