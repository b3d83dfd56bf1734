"""Config keys from the command line (`--set key=value`) and the environment (`FTIS_*`).

Any key of a pydantic config model can be set, by its dotted path:

    ftis-node join --set learner.ftis.C=3 --set swarm.records.ttl=300
    FTIS_LEARNER__FTIS__C=3 FTIS_SWARM__RECORDS__TTL=300 ftis-node join

An environment variable's name is `FTIS_` and the path with `__` between the parts (any
case: the parts are matched to the keys case-insensitively). A value is read as a TOML
value where that makes sense (`3`, `1e-5`, `true`, `["/ip4/...", "/ip4/..."]`) and kept as
text for text keys (`model`, `run_dir`, `swarm.transport.host`); a list key also takes a
comma-separated list (`FTIS_SWARM__TRANSPORT__PEERS=/ip4/...,/ip4/...`); `none` or `null` clears a key
that may be empty (`learner.lora=none`). An unknown key or variable is an error that names the
closest key. Variables that are settings of the tools, not config keys (`ENV_NOT_CONFIG`),
are left alone.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import sys
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from pydantic import BaseModel

from ftis_swarm.config import ConfigError, moved_key_sentence

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

logger = logging.getLogger(__name__)
ENV_PREFIX = "FTIS_"
ENV_NOT_CONFIG = frozenset({"FTIS_DATA_DIR", "FTIS_CACHE_DIR", "FTIS_LOG_LEVEL"})
"""Variables with the prefix that are not config keys: the data folder of the dataset tasks,
the model cache, the log level (`ftis-node --log-level`)."""
_NONE = ("none", "null")


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """`(annotation without Optional, whether None is allowed)`."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        allows_none = len(args) < len(typing.get_args(annotation))
        return (args[0] if len(args) == 1 else annotation), allows_none
    return annotation, False


def _section(annotation: Any) -> Optional[type[BaseModel]]:
    inner, _ = _unwrap(annotation)
    return inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


def all_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted key of `model`, sections included."""
    keys = []
    for name, field in model.model_fields.items():
        keys.append(prefix + name)
        section = _section(field.annotation)
        if section is not None:
            keys += all_keys(section, prefix + name + ".")
    return keys


def key_docs(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every key of `model` with its default and its docstring (`Field.description`, the one source of a key's
    docs), its plain keys first, then each section under a `[section]` line with the section's docstring."""
    lines, sections = [], []
    for name, field in model.model_fields.items():
        section = _section(field.annotation)
        if section is not None:
            sections.append((name, section))
            continue
        default = field.get_default(call_default_factory=True)
        shown = "none" if default is None else json.dumps(str(default) if isinstance(default, Path) else default)
        lines.append(f"{prefix}{name} = {shown}" + (f"  # {' '.join(field.description.split())}"
                                                     if field.description else ""))
    for name, section in sections:
        lines += ["", f"[{prefix}{name}]  # {' '.join((section.__doc__ or '').split())}"]
        lines += key_docs(section, prefix + name + ".")
    return lines


def resolve_key(model: type[BaseModel], dotted: str, *, source: str, env: bool = False) -> tuple[str, Any]:
    """`(the key as the model spells it, its annotation)`; ConfigError naming `source` when unknown.

    A key that moved into a section (a model's `MOVED_KEYS`: `swarm.ttl`) resolves to where it is
    now (`swarm.records.ttl`), with one WARNING sentence naming it."""
    cls: Optional[type[BaseModel]] = model
    names: list[str] = []
    annotation: Any = None
    parts = dotted.split(".")
    while parts:
        part = parts.pop(0)
        if cls is None:
            raise ConfigError(f"{source}: {'.'.join(names)} is a value, not a section")
        fields = cls.model_fields
        name = part if part in fields else next((f for f in fields if f.lower() == part.lower()), None)
        moved = _moved(cls, part)
        if moved is not None and (name is None or (not parts and _section(fields[name].annotation) is not None)):
            old, new = names + [part], names + moved
            logger.warning(moved_key_sentence(_env_name(old), _env_name(new)) if env else
                           moved_key_sentence(f"config key {'.'.join(old)}", ".".join(new)))
            parts[:0] = moved
            continue
        if name is None:
            known = all_keys(model)
            close = difflib.get_close_matches(".".join(names + [part]), known, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ConfigError(f"{source}: {'.'.join(names + [part])} is not a config key{hint}")
        names.append(name)
        annotation = fields[name].annotation
        cls = _section(annotation)
    return ".".join(names), annotation


def _env_name(parts: list[str]) -> str:
    return ENV_PREFIX + "__".join(parts).upper()


def _moved(model: type[BaseModel], part: str) -> Optional[list[str]]:
    """Where the old key `part` of `model` is now, as parts of a path in `model` (None: it did not move)."""
    moved: dict[str, str] = getattr(model, "MOVED_KEYS", {})
    old = next((k for k in moved if k.lower() == part.lower()), None)
    return moved[old].split(".") if old is not None else None


def parse_value(raw: str, annotation: Any) -> Any:
    """`raw` as the value of a key of type `annotation` (see the module docstring)."""
    inner, allows_none = _unwrap(annotation)
    if allows_none and raw.strip().lower() in _NONE:
        return None
    literal_text = typing.get_origin(inner) is typing.Literal and all(isinstance(a, str) for a in typing.get_args(inner))
    if inner in (str, Path) or literal_text:
        return raw
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # the model's validation says what is wrong with it
    if typing.get_origin(inner) is list and not isinstance(value, list):
        return [part.strip() for part in raw.split(",") if part.strip()]
    return value


def set_overrides(model: type[BaseModel], assignments: Iterable[str]) -> dict[str, Any]:
    """Dotted key -> value from `--set key=value` items."""
    out: dict[str, Any] = {}
    for item in assignments:
        key, eq, raw = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE (e.g. learner.ftis.C=3), got {item!r}")
        name, annotation = resolve_key(model, key.strip(), source=f"--set {key.strip()}")
        out[name] = parse_value(raw, annotation)
    return out


def env_overrides(model: type[BaseModel], environ: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """Dotted key -> value from `FTIS_<PATH>` variables (`FTIS_LEARNER__FTIS__C=3`), in name order."""
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for var in sorted(env):
        if not var.startswith(ENV_PREFIX) or var in ENV_NOT_CONFIG:
            continue
        dotted = ".".join(part.lower() for part in var[len(ENV_PREFIX):].split("__"))
        name, annotation = resolve_key(model, dotted, source=f"environment variable {var}", env=True)
        out[name] = parse_value(env[var], annotation)
    return out
