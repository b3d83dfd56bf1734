"""Model names: short names, folders, hub ids, and the one-sentence refusals."""

from __future__ import annotations

import pytest

from ftis_swarm.models import ModelNotFoundError, check_model_name, load_model, load_tokenizer, resolve_model
from ftis_swarm.models.loading import torch_dtype
from ftis_swarm.models.registry import QWEN_SHORT_NAMES


@pytest.mark.parametrize(
    "name, hub_id",
    [
        ("Qwen2.5-1.5B", "Qwen/Qwen2.5-1.5B"),
        ("qwen2.5-3b-instruct", "Qwen/Qwen2.5-3B-Instruct"),
        ("Qwen2.5-Coder-1.5B", "Qwen/Qwen2.5-Coder-1.5B"),
        ("Qwen2.5-Coder-3B-Instruct", "Qwen/Qwen2.5-Coder-3B-Instruct"),
        ("Qwen2.5-Math-7B", "Qwen/Qwen2.5-Math-7B"),
        ("  Qwen2.5-0.5B ", "Qwen/Qwen2.5-0.5B"),
    ],
)
def test_qwen_short_names_map_to_hub_ids(name: str, hub_id: str) -> None:
    assert resolve_model(name) == hub_id


def test_every_short_name_is_a_qwen_hub_id_and_sizes_are_real() -> None:
    assert all(v.startswith("Qwen/Qwen2.5-") for v in QWEN_SHORT_NAMES.values())
    assert "qwen2.5-coder-72b" not in QWEN_SHORT_NAMES  # Coder stops at 32B
    assert "qwen2.5-math-0.5b" not in QWEN_SHORT_NAMES
    assert len(QWEN_SHORT_NAMES) == 2 * (7 + 6 + 3)


def test_hub_ids_and_folders_pass_through(tmp_path) -> None:
    assert resolve_model("HuggingFaceTB/SmolLM2-360M-Instruct") == "HuggingFaceTB/SmolLM2-360M-Instruct"
    assert resolve_model(str(tmp_path)) == str(tmp_path)


@pytest.mark.parametrize(
    "name, words",
    [
        ("gpt-17", "unknown model 'gpt-17'"),
        ("", "unknown model ''"),
        ("/no/such/folder", "does not exist"),
        ("./relative/missing", "does not exist"),
        ("a/b/c", "unknown model 'a/b/c'"),
    ],
)
def test_unknown_models_get_one_sentence(name: str, words: str) -> None:
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model(name)
    msg = str(err.value)
    assert words in msg and "\n" not in msg


def test_a_file_is_not_a_model(tmp_path) -> None:
    f = tmp_path / "weights.bin"
    f.write_bytes(b"x")
    with pytest.raises(ModelNotFoundError, match="is a file"):
        resolve_model(str(f))


def test_a_folder_without_a_checkpoint_is_refused_in_one_sentence(tmp_path) -> None:
    with pytest.raises(ModelNotFoundError) as err:
        load_model(str(tmp_path))
    assert str(tmp_path) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ModelNotFoundError):
        load_tokenizer(str(tmp_path))


def test_dtype_names() -> None:
    import torch

    assert torch_dtype("bf16") is torch.bfloat16 and torch_dtype("fp32") is torch.float32
    with pytest.raises(ValueError, match="fp32, bf16, fp16"):
        torch_dtype("float8")


def test_pilot_siblings_drop_late_layers_and_resolve_by_short_name():
    from ftis_swarm.models.registry import short_names
    from ftis_swarm.models.smollm2 import SIBLINGS

    assert len(SIBLINGS["smollm2-slim27"]) == 27 and set(range(30)) - set(SIBLINGS["smollm2-slim27"]) == {25, 26, 27}
    assert len(SIBLINGS["smollm2-slim26"]) == 26 and set(range(30)) - set(SIBLINGS["smollm2-slim26"]) == {25, 26, 27, 28}
    assert {"smollm2-slim27", "smollm2-slim26"} <= set(short_names())
    check_model_name("SmolLM2-Slim26")  # short names are case-insensitive; nothing is built by the check
