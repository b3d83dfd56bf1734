"""What every config module shares: `Strict` (the base of every section), `ConfigError`, and the one way
a pydantic error becomes one sentence (`format_validation_error`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError

from ftis_swarm.errors import UserError


class ConfigError(UserError, ValueError):
    """A config file, environment variable or flag that does not validate, said in one sentence."""


_PYDANTIC_PREFIXES = ("Value error, ", "Assertion failed, ")


def format_validation_error(exc: ValidationError, *, as_flags: bool = False) -> str:
    """The first problem of a pydantic error as one sentence: `where: what (got value)`.

    `where` is the dotted key (`learner.ftis.mode`), or the flag (`--max-clock-skew`) with
    `as_flags`; pydantic's "Value error, " prefixes are dropped, and further problems are
    counted, not listed.
    """
    errors = exc.errors()
    first = errors[0]
    parts = [str(p) for p in first["loc"]]
    if as_flags:  # a flag is named after its key, without the key's section (`--ttl` sets `records.ttl`)
        where = "--" + parts[-1].replace("_", "-") if parts else "options"
    else:
        where = ".".join(parts) or "config"
    msg = first["msg"]
    for prefix in _PYDANTIC_PREFIXES:
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    got = first.get("input")
    plain = got is not None and not isinstance(got, (dict, list, tuple)) and first["type"] != "value_error"
    shown = f" (got {got!r})" if plain else ""
    more = len(errors) - 1
    tail = f"; and {more} more problem{'s' * (more > 1)}" if more else ""
    return f"{where}: {msg}{shown}{tail}"


class Strict(BaseModel):
    """A config section: unknown keys are errors, assignments are validated, and each key's docstring is also
    its `description` (`Field.description`), one source for its docs."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, use_attribute_docstrings=True)
