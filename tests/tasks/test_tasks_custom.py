"""Bring your own task (issue 44): `jsonl:PATH`, `rg:NAME`, entry points, per-operation arith, the task digest
on the wire and its refusal, bad input as one sentence, and docs/tasks.md's worked example run as written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ftis_swarm.config import TaskOptionsConfig
from ftis_swarm.errors import UserError
from ftis_swarm.peers import faults
from ftis_swarm.tasks import get_task, list_tasks, wire_name
from ftis_swarm.tasks.dataset import TaskSourceError
from ftis_swarm.wire import Group, WireError, WireVersionError, decode_group, encode_group

ROOT = Path(__file__).resolve().parents[2]
NUMBER = TaskOptionsConfig(verifier="number")


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def sums(path: Path) -> Path:
    return write_rows(path, [{"prompt": f"What is {a} plus {b}?", "answer": str(a + b)}
                             for a in range(1, 10) for b in range(1, 10)])


def test_jsonl_task_items_splits_and_number_verifier(tmp_path):
    task = get_task(f"jsonl:{sums(tmp_path / 'd' / 'sums.jsonl')}", options=NUMBER)
    assert task.name == "jsonl:sums" and task.size("train") + task.size("test") == 81
    assert 8 <= task.size("test") <= 25  # test_fraction 0.2 of 81 questions, by hash
    train = {i.question for i in task.sample(task.size("train"), seed=0)}
    test = {i.question for i in task.sample(task.size("test"), seed=0, split="test")}
    assert not train & test and len(train | test) == 81
    item = task.sample(1, seed=3)[0]
    assert task.item(item.item_id) == item and item.item_id.startswith("jsonl:sums/v1/train/")
    scores = task.score([item] * 3, [f"so {item.answer}", "no idea", f"{int(item.answer) + 1}"])
    assert [s.reason for s in scores] == ["correct", "no_answer", "wrong"]


def test_split_column_exact_and_choice_verifiers(tmp_path):
    path = write_rows(tmp_path / "qa.jsonl", [
        {"q": "Capital of France?", "a": "Paris", "id": "fr", "s": "train"},
        {"q": "Capital of Italy?", "a": "Rome", "id": "it", "s": "test"},
    ])
    opts = TaskOptionsConfig(prompt_key="q", answer_key="a", id_key="id", split_key="s", verifier="exact", name="caps")
    task = get_task(f"jsonl:{path}", options=opts)
    assert task.name == "jsonl:caps" and task.size("train") == task.size("test") == 1
    fr = task.item("jsonl:caps/v1/train/fr")
    assert [s.reward for s in task.score([fr] * 3, ["It is \\boxed{paris.}", "Answer:\n  PARIS ", "Lyon"])] == [1, 1, 0]
    mc = write_rows(tmp_path / "mc.jsonl", [{"prompt": f"Pick {x}: (A) 1 (B) 2", "answer": x} for x in "AB"])
    task = get_task(f"jsonl:{mc}", options=TaskOptionsConfig(verifier="choice", test_fraction=0.01))
    item = task.item("jsonl:mc/v1/train/1")
    assert [s.reward for s in task.score([item] * 3, ["The answer is (B).", "\\boxed{A}", "B is it"])] == [1, 0, 1]


def test_callable_verifier_digest_and_local_only(tmp_path, monkeypatch):
    (tmp_path / "myverify.py").write_text("def check(completion, answer):\n    return answer in completion\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    data = sums(tmp_path / "sums.jsonl")
    task = get_task(f"jsonl:{data}", options=TaskOptionsConfig(verifier="myverify:check"))
    assert not task.local_only
    verifier = task.definition()["verifier"]
    assert verifier["callable"] == "myverify:check" and len(verifier["source_sha256"]) == 64
    item = task.sample(1, seed=0)[0]
    assert [s.reward for s in task.score([item] * 2, [f"= {item.answer}", "none"])] == [1.0, 0.0]
    builtin = get_task(f"jsonl:{data}", options=TaskOptionsConfig(verifier="operator:eq"))  # no Python source
    assert builtin.local_only and builtin.digest != task.digest


def test_bad_input_is_one_sentence(tmp_path, monkeypatch):
    cases = {
        "missing": (tmp_path / "nope.jsonl", NUMBER, "cannot read"),
        "malformed": (write_rows(tmp_path / "m.jsonl", [{"prompt": "a", "answer": "1"}]), NUMBER, None),
        "no answer": (write_rows(tmp_path / "n.jsonl", [{"prompt": "What is 1 plus 1?"}]), NUMBER, "no 'answer'"),
        "not a number": (write_rows(tmp_path / "w.jsonl", [{"prompt": "Q?", "answer": "blue"}]), NUMBER,
                         "does not accept"),
    }
    with open(cases["malformed"][0], "a") as f:
        f.write("{not json\n")
    cases["malformed"] = (cases["malformed"][0], NUMBER, "line 2 is not JSON")
    (tmp_path / "badverify.py").write_text("def check(completion, answer):\n    return int(answer) > 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cases["verifier raises"] = (write_rows(tmp_path / "v.jsonl", [{"prompt": "Q?", "answer": "x"}]),
                                TaskOptionsConfig(verifier="badverify:check"), "raised ValueError")
    for name, (path, opts, words) in cases.items():
        with pytest.raises(TaskSourceError) as info:
            get_task(f"jsonl:{path}", options=opts)
        assert isinstance(info.value, UserError) and words in str(info.value) and "\n" not in str(info.value), name
    with pytest.raises(UserError, match="unknown reasoning-gym family 'no_such_family'"):
        get_task("rg:no_such_family")


def test_cli_refuses_bad_task_with_exit_2(tmp_path):
    from ftis_swarm.cli.main import app

    missing = tmp_path / "gone.jsonl"
    result = CliRunner().invoke(app, ["join", "--task", f"jsonl:{missing}", "--run-dir", str(tmp_path / "run"),
                                      "--print-config"])
    assert result.exit_code == 2, result.output
    assert "cannot read" in result.output and str(missing) in result.output
    result = CliRunner().invoke(app, ["join", "--task", "rg:nonesuch", "--print-config"])
    assert result.exit_code == 2 and "unknown reasoning-gym family" in result.output


def test_reasoning_gym_family(tmp_path):
    task = get_task("rg:leg_counting")
    assert task.name == "rg:leg_counting" and task.definition()["family"] == "leg_counting"
    items = task.sample(40, seed=1)
    tests = task.sample(40, seed=1, split="test")
    assert not {i.question for i in items} & {i.question for i in tests}
    assert task.item(items[0].item_id) == items[0]
    scores = task.score(items[:3], [f"<answer>{items[0].answer}</answer>", "<answer>-1</answer>", "12"])
    assert [s.reason for s in scores] == ["correct", "wrong", "no_answer"]
    configured = get_task("rg:leg_counting", options=TaskOptionsConfig(rg={"min_animals": 1, "max_animals": 2}))
    assert configured.digest != task.digest


def test_reasoning_gym_answer_forms_for_models_that_write_no_tags():
    tags = get_task("rg:chain_sum")
    digests = {tags.digest}
    item = tags.sample(1, seed=3)[0]
    for form, ask, right, wrong in (
            ("last_number", "Answer with a single number.", f"Adding up: 7 and then {item.answer}",
             f"It is {item.answer}, no, {int(item.answer) + 1}"),
            ("last_line", "Give only the final answer, on the last line.", f"Let me see.\n{item.answer}\n",
             f"{item.answer}\nor maybe {item.answer}")):
        task = get_task("rg:chain_sum", options=TaskOptionsConfig(rg_answer=form))
        same = task.item(item.item_id)
        assert same.question == item.question and same.prompt == f"{item.question}\n{ask}"
        scores = task.score([same] * 3, [right, wrong, f"<answer>{item.answer}</answer> done"])
        assert [s.reason for s in scores][:2] == ["correct", "wrong"], (form, scores)
        digests.add(task.digest)
    # the tags form still reads only tags; each form is its own task on the wire (a peer must read answers alike)
    assert [s.reason for s in tags.score([item] * 2, [f"<answer>{item.answer}</answer>", item.answer])] == [
        "correct", "no_answer"]
    assert len(digests) == 3
    asked = get_task("rg:chain_sum", options=TaskOptionsConfig(rg_answer="last_number", instruction="Only the sum."))
    assert asked.item(item.item_id).prompt.endswith("\nOnly the sum.") and asked.digest not in digests
    with pytest.raises(ValueError, match="rg_answer"):
        TaskOptionsConfig(rg_answer="boxed")


def test_per_operation_arith_tasks():
    from ftis_swarm.tasks.arith_mix import ArithMixTask

    mix_test = {i.question for i in ArithMixTask().sample(95, seed=0, split="test")}
    by_name = {}
    for name, ops, sizes in (("arith_add", "+", (48, 33)), ("arith_sub", "-", (49, 32)), ("arith_mul", "*", (51, 30)),
                             ("arith_addsub", "+-", (97, 65))):
        task = get_task(name)
        assert (task.size("train"), task.size("test")) == sizes and name in list_tasks()
        test = {i.question for i in task.sample(sizes[1], seed=0, split="test")}
        assert len(test) == sizes[1] and all(any(f" {op} " in q for op in ops) for q in test) and test <= mix_test
        by_name[name] = test
    assert by_name["arith_addsub"] == by_name["arith_add"] | by_name["arith_sub"]  # the same split as one operation


def test_entry_point_task(tmp_path, monkeypatch):
    (tmp_path / "byo_task_pkg.py").write_text(textwrap.dedent('''
        from ftis_swarm.tasks.arith_mix import ArithMixTask

        class DoubledTask(ArithMixTask):
            name = "byo_doubled"
            operations = ("+",)
    '''))
    info = tmp_path / "byo_task_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: byo-task-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[ftis_swarm.tasks]\nbyo_doubled = byo_task_pkg:DoubledTask\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "byo_doubled" in list_tasks()
    task = get_task("byo_doubled")
    assert task.name == "byo_doubled" and task.size("test") == 33
    assert task.definition()["class"] == "byo_task_pkg:DoubledTask"


def test_digest_is_the_same_in_two_processes_from_two_copies(tmp_path):
    one = sums(tmp_path / "copy_one" / "sums.jsonl")
    two = tmp_path / "elsewhere" / "deeper" / "sums.jsonl"
    two.parent.mkdir(parents=True)
    shutil.copy(one, two)
    code = ("import sys; from ftis_swarm.config import TaskOptionsConfig; from ftis_swarm.tasks import get_task; "
            "print(get_task('jsonl:' + sys.argv[1], options=TaskOptionsConfig(verifier='number')).digest)")
    digests = [subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, check=True,
                              cwd=p.parent, env={**os.environ, "PYTHONHASHSEED": str(i)}).stdout.strip()
               for i, p in enumerate((one, two))]
    assert digests[0] == digests[1] and len(digests[0]) == 32
    assert digests[0] == get_task(f"jsonl:{one}", options=NUMBER).digest
    two.write_text(two.read_text().replace('"answer": "2"', '"answer": "3"', 1).replace("1 plus 1", "1 plus 2", 1))
    assert get_task(f"jsonl:{two}", options=NUMBER).digest != digests[0]
    assert get_task(f"jsonl:{one}", options=TaskOptionsConfig(verifier="number", test_fraction=0.3)).digest \
        != digests[0]


def test_wire_v2_carries_the_digest_and_refuses_v1():
    import msgpack

    group = Group.build(run_id="r", sender="s", model_id="m", policy_version=0, created_at=0.0, tokenizer_fp="f" * 32,
                        task_id="arith", task_digest=get_task("arith").digest, item_id="arith/v1/s0/1",
                        prompt_ids=[1, 2], temperature=1.0, completion_ids=[[3], [4]], logp_gen=[[-1.0], [-1.0]])
    back = decode_group(encode_group(group))
    assert back.task_digest == get_task("arith").digest and back.version == 2
    record = msgpack.unpackb(encode_group(group), raw=False)
    assert list(record)[8] == "tdg"
    old = {k: v for k, v in record.items() if k != "tdg"}
    old["v"] = 1
    with pytest.raises(WireVersionError, match="wire version 1"):
        decode_group(msgpack.packb(old, use_bin_type=True))
    record["tdg"] = "x" * 65
    with pytest.raises(WireError, match="tdg"):
        decode_group(msgpack.packb(record, use_bin_type=True))
    assert faults.cost_of(faults.TASK_DIGEST) == 0 and faults.cost_of(faults.SWARM_PREFIX + faults.OLD_VERSION) == 0


def test_node_names_and_accepts_the_wire_name(tmp_path):
    from ftis_swarm.config import NodeConfig
    from ftis_swarm.node.learning import node_admission

    path = sums(tmp_path / "sums.jsonl")
    cfg = NodeConfig(task=f"jsonl:{path}", task_options={"verifier": "number"}, run_dir=tmp_path / "run")
    assert wire_name(cfg.task, cfg.task_options) == "jsonl:sums"
    get_task(cfg.task, options=cfg.task_options)
    assert node_admission(cfg, "f" * 32).accept_tasks == frozenset({"jsonl:sums"})
    assert get_task("jsonl:sums").digest == get_task(cfg.task, options=cfg.task_options).digest  # a peer's id


def test_worked_example(tmp_path, monkeypatch, capsys):
    text = (ROOT / "docs" / "tasks.md").read_text()
    code = text.split("# worked example\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/tasks.md worked example", "exec"), {})
    assert "accepted: ['A'] [1.0, 0.0] refused: {'task_digest': 1}" in capsys.readouterr().out
