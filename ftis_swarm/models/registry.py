"""Model names a user may give `--model`, and what each one resolves to.

Three kinds of name: a short name of ours (`smollm2-135m`, the embedded default converted
once into the cache; `smollm2-mini`, `smollm2-slim`, `smollm2-slim27` and
`smollm2-slim26`, its smaller siblings; `smollm2-bias<sigma>`, SmolLM2 with a fixed random
logit bias of scale sigma, the experiment's peer with a dial (models/logit_bias.py); the Qwen2.5 family by its short
name, `Qwen2.5-1.5B` -> `Qwen/Qwen2.5-1.5B`), a local checkpoint folder, or a hub id
(`owner/name`), which passes through untouched for transformers to fetch on machines that
reach the hub. Anything else is refused here with one sentence, before anything loads.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Callable

from ftis_swarm.errors import UserError
from ftis_swarm.models import smollm2
from ftis_swarm.models.logit_bias import bias_name, parse_bias_name


class ModelNotFoundError(UserError, LookupError):
    """A model name that is neither a short name, an existing folder, nor a loadable hub id."""


_LOCAL: dict[str, Callable[[], Path]] = {
    "smollm2-135m": smollm2.converted_smollm2,
    **{name: functools.partial(smollm2.sibling_smollm2, name) for name in smollm2.SIBLINGS},
}
_QWEN_SIZES = {
    "Qwen2.5": ("0.5B", "1.5B", "3B", "7B", "14B", "32B", "72B"),
    "Qwen2.5-Coder": ("0.5B", "1.5B", "3B", "7B", "14B", "32B"),
    "Qwen2.5-Math": ("1.5B", "7B", "72B"),
}
QWEN_SHORT_NAMES: dict[str, str] = {
    f"{family}-{size}{suffix}".lower(): f"Qwen/{family}-{size}{suffix}"
    for family, sizes in _QWEN_SIZES.items()
    for size in sizes
    for suffix in ("", "-Instruct")
}
"""Lower-cased short name -> hub id, for every Qwen2.5 base/Instruct/Coder/Math size."""
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")


def short_names() -> list[str]:
    """Our short names, for help texts and error messages."""
    return sorted(_LOCAL) + ["smollm2-bias<sigma>", "Qwen2.5-<size>[-Instruct]", "Qwen2.5-Coder-<size>[-Instruct]", "Qwen2.5-Math-<size>[-Instruct]"]


def _classify(name: str) -> tuple[str, str]:
    """`(kind, value)` of a model name without converting or loading anything; refuses bad names.

    Kinds: `embedded` (value: our short name), `hub` (value: the hub id, Qwen short names
    mapped), `folder` (value: the path).
    """
    raw = name.strip()
    key = raw.lower()
    if key in _LOCAL:
        return "embedded", key
    try:
        sigma = parse_bias_name(key)
    except ValueError as exc:
        raise ModelNotFoundError(str(exc)) from None
    if sigma is not None:
        return "embedded", bias_name(sigma)
    if key in QWEN_SHORT_NAMES:
        return "hub", QWEN_SHORT_NAMES[key]
    path = Path(raw).expanduser()
    if raw and path.is_dir():
        return "folder", str(path)
    if raw and path.exists():
        raise ModelNotFoundError(f"model {raw!r} is a file, not a checkpoint folder (config.json and weights)")
    if raw.startswith(("/", "./", "../", "~")):
        raise ModelNotFoundError(f"model folder {raw!r} does not exist")
    if _HUB_ID.match(raw):
        return "hub", raw
    raise ModelNotFoundError(
        f"unknown model {raw!r}: give a hub id (owner/name), a local checkpoint folder, or one of "
        f"{', '.join(short_names())}"
    )


def check_model_name(name: str) -> None:
    """Refuses, in one sentence, a name that would not load: unknown, or a folder without config.json.

    Converts, downloads and loads nothing (the CLI calls it before anything is written).
    """
    kind, value = _classify(name)
    if kind == "folder" and not (Path(value) / "config.json").is_file():
        raise ModelNotFoundError(f"model folder {name.strip()!r} has no config.json: it is not a transformers checkpoint")


def hub_id_of(name: str) -> str | None:
    """The hub id `name` loads from (Qwen short names mapped), or None for our models and local folders."""
    kind, value = _classify(name)
    return value if kind == "hub" else None


def portable_model_name(name: str) -> str:
    """`name` as it resolves from any working directory: short names and hub ids as given, folders absolute."""
    kind, value = _classify(name)
    return str(Path(value).resolve()) if kind == "folder" else name.strip()


def resolve_model(name: str) -> str:
    """A local checkpoint folder or a hub id for `name`; converts the embedded models on first use."""
    kind, value = _classify(name)
    if kind != "embedded":
        return value
    sigma = parse_bias_name(value)
    return str(smollm2.biased_smollm2(sigma) if sigma is not None else _LOCAL[value]())

