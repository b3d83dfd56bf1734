"""Answer extraction, and arith's answer form on replies the way SmolLM2-135M-Instruct writes them."""

from __future__ import annotations

import pytest

from ftis_swarm.tasks import get_task
from ftis_swarm.tasks.answers import after_hashes, last_boxed, last_number, same_number


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{42}.", "42"),
        ("first \\boxed{1}, finally \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("\\fbox{7} is it", "7"),
        ("\\boxed 5.", "5"),
        ("cut off: \\boxed{\\frac{1}{2", None),
        ("\\boxed{}", None),
        ("no box at all: 12", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Janet sells 9 eggs.\n#### 18", ("18", 20)),
        ("#### 1,000.", ("1000", 0)),
        ("#### $-3.5", ("-3.5", 0)),
        ("#### 4\nthen #### 5", ("5", 12)),
        ("#### none", None),
        ("the answer is 18", None),
    ],
)
def test_after_hashes(text, expected):
    assert after_hashes(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 + 6 = 7", "7"),
        ("The sum is 1,234.", "1234"),
        ("3 - 5 = -2", "-2"),
        ("It is 7.0", "7.0"),
        ("Hello there!", None),
    ],
)
def test_last_number(text, expected):
    assert last_number(text) == expected


def test_same_number():
    assert same_number("7.0", "7") and same_number("-2", "-2.00")
    assert not same_number("7.01", "7") and not same_number("seven", "7")


# Replies sampled from SmolLM2-135M-Instruct on arith prompts (tests/tasks/start_reward.py),
# with the ground truth of their prompt and the reward the documented answer form gives.
SMOLLM2_REPLIES = [
    ("1 + 6 = 7", "7", 1.0),
    ("The final answer to this equation is 11.", "7", 0.0),
    ("The sum of 3 and 4 is 7.", "7", 1.0),
    ("To calculate 8 + 9, we add the two numbers together: 8 + 9 = 17. So, the result is 17.", "17", 1.0),
    ("Sure! 5 + 8 = 13. Let me know if you have any other questions!", "13", 1.0),
    ("5 + 8 = 13. Here's another one: 2 + 2 = 4", "13", 0.0),
    ("Although the prompt left no solution so far, a clickblender error could investigate", "7", 0.0),
    ("The answer is \\boxed{16}.", "16", 1.0),
    ("Once again, for 1 + 6, resulting in the equitive 1 + 6 equals the same answer", "7", 0.0),
    ("The answer to the equation 8 + 9 is 17.", "17", 1.0),
    ("To solve this, we need to find the sum of 4 and 2. \n\n4 + 2 = 6\n\nSo the answer is 6.", "6", 1.0),
    ("Asked: 5 + 8 = 13\nDid You Get It: A NUMBER!\nHarness the Power on the answer for 5 + 8 and", "13", 0.0),
    ("The short answer to this classic math problem is 9, but you should avoid fractions", "7", 0.0),
]


def test_arith_answer_form_on_default_model_replies():
    task = get_task("arith")
    item = task.sample(1, seed=0)[0]
    for reply, truth, reward in SMOLLM2_REPLIES:
        probe = type(item)(**{**item.__dict__, "answer": truth})
        score = task.score([probe], [reply])[0]
        assert score.reward == reward, reply
        assert score.reason == ("correct" if reward else ("no_answer" if last_number(reply) is None else "wrong"))
