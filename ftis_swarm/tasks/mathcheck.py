"""The check that runs inside a verifier worker: math-verify on one extracted answer.

Imported by the workers (`verifier.shared_pool` preloads it), never needed in the learner's
process except to name `check_answer` for pickling; math-verify itself is imported inside
the functions, so naming it costs nothing there.

The answer arrives already extracted (the content of the last `\\boxed{}`, or the number
after `####`): the format requirement is enforced before this point, and math-verify is
asked only whether two expressions are equal. Both sides are wrapped in `\\boxed{}` so that
math-verify's LaTeX extraction parses exactly that expression and nothing around it.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

logger = logging.getLogger(__name__)


def _latex_config() -> list[Any]:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    return [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]


def _parse_boxed(text: str, alarm_s: int, *, raise_on_error: bool) -> list[Any]:
    """math-verify's parse of `\\boxed{text}`, keeping only real expressions (not its string fallback)."""
    from math_verify import parse
    from sympy import Basic, MatrixBase

    parsed = parse(
        "\\boxed{" + text + "}",
        extraction_config=_latex_config(),
        parsing_timeout=alarm_s,
        raise_on_error=raise_on_error,
    )
    return [p for p in parsed if isinstance(p, (Basic, MatrixBase))]


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str, alarm_s: int) -> list[Any]:
    return _parse_boxed(gold, alarm_s, raise_on_error=False)


def warm_up() -> None:
    """Import math-verify and sympy and run one check, so the first real answer starts warm."""
    check_answer("1", "1", 5)


def check_answer(answer: str, gold: str, alarm_s: int) -> tuple[bool, str]:
    """Whether `answer` equals `gold`, and why: `correct`, `wrong`, `unparseable` or `timeout`.

    `alarm_s` arms math-verify's own `signal.alarm` per parse and per comparison; the pool's
    kill is the backstop for hangs no signal interrupts. `gold_unparseable` flags a task
    whose ground truth math-verify cannot read (a task bug, counted apart from the model's).
    """
    from math_verify import verify
    from math_verify.errors import TimeoutException

    try:
        gold_parsed = _parse_gold(gold, alarm_s)
        if not gold_parsed:
            return False, "gold_unparseable"
        parsed = _parse_boxed(answer, alarm_s, raise_on_error=True)
        if not parsed:
            return False, "unparseable"
        if verify(gold_parsed, parsed, timeout_seconds=alarm_s, raise_on_error=True):
            return True, "correct"
        return False, "wrong"
    except TimeoutException:
        return False, "timeout"
    except Exception as exc:  # sympy raises anything from TypeError to RecursionError on odd input
        logger.debug("math-verify failed on %r: %s", answer[:200], exc)
        return False, "unparseable"
