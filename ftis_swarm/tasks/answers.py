"""Pulling the final answer out of a decoded completion: pure string functions, no sympy.

They run in the learner's process (cheap, linear-time scans), so a completion without an
answer in the required form gets its zero reward without a round trip to the verifier
pool; only the extracted answer string travels to math-verify (`verifier.py`).
"""

from __future__ import annotations

import re
from fractions import Fraction

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_HASH_ANSWER = re.compile(r"####[ \t]*\$?[ \t]*(-?\d[\d,]*(?:\.\d+)?)")


def last_boxed(text: str) -> str | None:
    r"""Content of the last `\boxed{...}` (or `\fbox{...}`) in `text`, braces balanced.

    None when there is none or its braces never close (a completion cut off by the token
    limit): a truncated box is no answer. `\boxed 5` (no braces) is accepted as `5`, as
    MATH's own solutions occasionally write it.
    """
    start = max(text.rfind(cmd) for cmd in _BOX_COMMANDS)
    if start < 0:
        return None
    cmd = "\\boxed" if text.startswith("\\boxed", start) else "\\fbox"
    i = start + len(cmd)
    while i < len(text) and text[i] == " ":
        i += 1
    if i >= len(text):
        return None
    if text[i] != "{":
        match = re.match(r"[^\s$.,]+", text[i:])
        return match.group(0) if match else None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                content = text[i + 1 : j].strip()
                return content or None
    return None


def last_boxed_position(text: str) -> int:
    """Where the last box command starts, -1 when there is none (for "whichever comes last")."""
    return max(text.rfind(cmd) for cmd in _BOX_COMMANDS)


def after_hashes(text: str) -> tuple[str, int] | None:
    """GSM8K's `#### N` form: the number after the last `####`, and where that marker starts.

    Thousands separators are dropped (`#### 1,000.` -> `1000`). None when there is no
    `####`, or the last one is not followed by a number.
    """
    start = text.rfind("####")
    match = _HASH_ANSWER.match(text, start) if start >= 0 else None
    return None if match is None else (match.group(1).replace(",", ""), start)


def last_number(text: str) -> str | None:
    """The last number in `text` (sign and decimals kept, thousands separators dropped)."""
    numbers = _NUMBER.findall(_THOUSANDS.sub("", text))
    return numbers[-1] if numbers else None


def same_number(a: str, b: str) -> bool:
    """Exact equality of two decimal strings (`7.0` equals `7`); False if either is not one."""
    try:
        return Fraction(a) == Fraction(b)
    except (ValueError, ZeroDivisionError):
        return False
