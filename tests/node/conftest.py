from __future__ import annotations

import pytest

from ftis_swarm.models.tiny import build_tiny_qwen2


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny-node"), hidden_size=32, num_layers=1, seed=3)
