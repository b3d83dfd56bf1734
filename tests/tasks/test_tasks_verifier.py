"""The verifier pool and the bad-input paths of scoring: timeouts, dead workers, unreadable answers.

The pool and its timeouts are the real ones; where a hang must be certain, the job is a
stdlib function that blocks (`time.sleep`) or kills its worker (`os._exit`), sent through
the same pool the tasks use.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from ftis_swarm.tasks import Score, get_task, reason_counts
from ftis_swarm.tasks.verifier import Outcome, VerifierPool, VerifierUnavailable, shared_pool


@pytest.fixture(scope="module")
def pool():
    pool = VerifierPool(workers=2)
    yield pool
    pool.close()


def test_a_hung_call_costs_its_timeout_and_the_pool_recovers(pool):
    pool.run(abs, [(-1,), (-2,)], timeout=60)  # both workers started and ready
    before = pool.replaced
    start = time.monotonic()
    outcomes = pool.run(time.sleep, [(30,), (0.01,), (0.02,)], timeout=1.0)
    elapsed = time.monotonic() - start
    assert outcomes == [Outcome("timeout"), Outcome("ok", None), Outcome("ok", None)]
    assert 1.0 <= elapsed < 3.0
    assert pool.replaced == before + 1
    assert pool.run(divmod, [(7, 2)], timeout=60) == [Outcome("ok", (3, 1))]


def test_a_dead_worker_is_reported_and_replaced(pool):
    before = pool.replaced
    outcomes = pool.run(os._exit, [(3,)], timeout=30)
    assert outcomes == [Outcome("died")]
    assert pool.replaced == before + 1
    assert pool.run(pow, [(2, 10), (3, 3)], timeout=60) == [Outcome("ok", 1024), Outcome("ok", 27)]


def test_a_worker_killed_while_idle_is_replaced(pool):
    pool.run(abs, [(-1,), (-2,)], timeout=60)
    before = pool.replaced
    for worker in list(pool._idle.queue):  # killed from outside, e.g. by the OOM killer
        worker.proc.kill()
        worker.proc.wait()
    assert pool.run(abs, [(-3,), (-4,)], timeout=60) == [Outcome("ok", 3), Outcome("ok", 4)]
    assert pool.replaced == before + 2


def test_a_pool_whose_workers_cannot_start_says_so():
    broken = VerifierPool(workers=1, preload=("ftis_swarm.no_such_module",))
    with pytest.raises(VerifierUnavailable, match="end before they are ready \\(last exit code 1\\)"):
        broken.run(abs, [(-1,)], timeout=5)
    broken.close()


def test_an_exception_is_that_call_s_outcome(pool):
    outcomes = pool.run(int, [("12",), ("twelve",)], timeout=60)
    assert outcomes[0] == Outcome("ok", 12)
    assert outcomes[1].status == "error" and "ValueError" in outcomes[1].value


def test_calls_from_several_threads_at_once(pool):
    results: dict[int, list[Outcome]] = {}

    def call(k: int) -> None:
        results[k] = pool.run(pow, [(k, e) for e in range(5)], timeout=60)

    threads = [threading.Thread(target=call, args=(k,)) for k in range(2, 6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == {k: [Outcome("ok", k**e) for e in range(5)] for k in range(2, 6)}


def test_the_shared_pool_is_one_object():
    assert shared_pool() is shared_pool()


def test_a_pathological_answer_scores_zero_with_reason_timeout():
    task = get_task("gsm_symbolic", verify_timeout=2.0)
    item = task.sample(1, seed=0)[0]
    task.score([item], ["\\boxed{0}"])  # the workers are up before the clock starts
    start = time.monotonic()
    hung = "\\boxed{9^{9^{9^{9}}}}"
    scores = task.score([item] * 4, [hung, f"\\boxed{{{item.answer}}}", hung, hung])
    elapsed = time.monotonic() - start
    timeout, correct = Score(0.0, False, "timeout"), Score(1.0, True, "correct")
    assert scores == [timeout, correct, timeout, timeout]
    assert elapsed < 2.0 + 1.5  # the same hung answer three times costs one timeout


def test_scoring_from_a_non_main_thread():
    task = get_task("gsm_symbolic")
    items = task.sample(4, seed=1)
    box = {}
    thread = threading.Thread(target=lambda: box.update(s=task.score(items, [f"\\boxed{{{i.answer}}}" for i in items])))
    thread.start()
    thread.join(timeout=120)
    assert [s.reward for s in box["s"]] == [1.0] * 4


def test_unreadable_and_missing_answers_score_zero_with_their_reason():
    task = get_task("gsm_symbolic")
    item = task.sample(1, seed=2)[0]
    completions = [
        "I think it is \\boxed{}{",  # an empty box: no answer in the required form
        "so the answer is \\boxed{)(}",  # a box math-verify cannot read
        "\\boxed{\\frac{1}{2",  # cut off by the token limit
        "The answer is " + item.answer,  # right number, but not in the required form
        f"\\boxed{{{int(item.answer) + 1}}}",
        f"\\boxed{{{item.answer}}}",
    ]
    scores = task.score([item] * len(completions), completions)
    assert [s.reason for s in scores] == ["no_answer", "unparseable", "no_answer", "no_answer", "wrong", "correct"]
    assert [s.reward for s in scores] == [0.0] * 5 + [1.0]
    assert reason_counts(scores) == {
        "correct": 1, "wrong": 1, "no_answer": 3, "unparseable": 1,
        "timeout": 0, "verifier_error": 0, "gold_unparseable": 0,
    }


def test_score_refuses_caller_bugs():
    task = get_task("arith")
    items = task.sample(2, seed=0)
    with pytest.raises(ValueError, match="2 items but 1 completions"):
        task.score(items, ["7"])
    with pytest.raises(ValueError, match="belongs to task arith, not gsm_symbolic"):
        get_task("gsm_symbolic").score(items[:1], ["7"])
