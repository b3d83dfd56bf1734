"""`python -m ftis_swarm.cli` runs `ftis-node` (the testnet starts its processes this way)."""

from ftis_swarm.cli.main import main

main()
