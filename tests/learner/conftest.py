from __future__ import annotations

import pytest
from transformers import AutoModelForCausalLM

from ftis_swarm.models.tiny import build_tiny_qwen2


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny"), hidden_size=32, num_layers=2, seed=0)


@pytest.fixture
def tiny_model(tiny_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_dir)
