"""Declaring a setting once: its default, its help, its allowed values, all in the dataclass field.

:func:`setting` makes a ``dataclasses.field`` whose metadata the rest of the package reads:
:func:`check_settings` (each config's ``__post_init__``) enforces the bounds and choices, and the
command line (:mod:`highwaynet.cli`) makes each field an option with this help and default.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["check_settings", "setting"]


def setting(default: Any = dataclasses.MISSING, *, help: str, factory: Callable[[], Any] | None = None,
            choices: Sequence[Any] | None = None, minimum: float | None = None, below: float | None = None,
            flag: str | None = None, metavar: str | None = None, cli: bool = True, distinct: bool = True) -> Any:
    """A configuration field.

    Args:
        default: the value (or ``factory``, for a list or a nested configuration).
        help: what the setting does, in a sentence (the option's help).
        choices: the allowed values (each element's, for a list).
        minimum: the smallest allowed value (each element's, for a list); floats must also be finite.
        below: the allowed values are smaller than this (a probability: ``below=1``).
        flag: the command-line option, where not ``--`` and the field's name with dashes.
        metavar: the option's placeholder in the help.
        cli: whether the command line offers it (a field a sweep sets for each run says False).
        distinct: for a list, whether its values must differ (a sweep's: each value is runs of its own);
            False for one that describes a model (a CNN's channels per stage may repeat).
    """
    metadata = {"help": help, "choices": tuple(choices) if choices is not None else None, "minimum": minimum,
                "below": below, "flag": flag, "metavar": metavar, "cli": cli, "distinct": distinct}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _describe(config: Any, name: str) -> str:
    return f"{type(config).__name__}.{name}"


def _check_one(config: Any, name: str, value: Any, meta: dict[str, Any]) -> None:
    where = _describe(config, name)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value}")
    if meta["choices"] is not None and value not in meta["choices"]:
        raise ValueError(f"{where} must be one of {', '.join(map(repr, meta['choices']))}; got {value!r}")
    if meta["minimum"] is not None and isinstance(value, (int, float)) and value < meta["minimum"]:
        raise ValueError(f"{where} must be at least {meta['minimum']}, got {value}")
    if meta["below"] is not None and isinstance(value, (int, float)) and not value < meta["below"]:
        raise ValueError(f"{where} must be below {meta['below']}, got {value}")


def _fits(value: Any, kind: Any) -> bool:
    """Whether ``value`` is of the annotated type ``kind`` (the scalars, lists, optionals and nested
    configurations the settings use; a float setting takes an int too)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if kind is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list) and all(_fits(v, args[0]) for v in value)
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is str:
        return isinstance(value, str)
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        return isinstance(value, kind)
    return True


def _type_name(kind: Any) -> str:
    return str(kind).replace("typing.", "") if typing.get_args(kind) else getattr(kind, "__name__", str(kind))


def check_settings(config: Any) -> None:
    """Check every field of a configuration against its :func:`setting`'s type, bounds and choices,
    and turn nested dictionaries (a ``config.json``'s) into their configuration classes. Each config's
    ``__post_init__`` calls it, so that a configuration made from Python, from a saved run or from the
    command line is checked in the one same place."""
    hints = typing.get_type_hints(type(config))
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        kind = hints[field.name]
        if dataclasses.is_dataclass(kind) and isinstance(value, dict):
            value = kind(**value)  # type: ignore[operator]
            setattr(config, field.name, value)
        if not field.metadata:
            continue
        if typing.get_origin(kind) is list and isinstance(value, tuple):  # (a fixed sequence, as Python writes one)
            value = list(value)
            setattr(config, field.name, value)
        if not _fits(value, kind):  # (a configuration from a hand-edited config.json, say)
            raise ValueError(f"{_describe(config, field.name)} must be {_type_name(kind)}, got {value!r}")
        if isinstance(value, list):
            if not value:
                raise ValueError(f"{_describe(config, field.name)} needs at least one value")
            repeated = sorted({repr(v) for v in value if value.count(v) > 1})
            # (a sweep would train the same runs twice and report one run as a spread)
            if repeated and field.metadata.get("distinct", True):
                raise ValueError(f"{_describe(config, field.name)} lists {', '.join(repeated)} more than once: give "
                                 f"each value once")
            for item in value:
                _check_one(config, field.name, item, dict(field.metadata))
        elif value is not None:
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
                setattr(config, field.name, value)
            _check_one(config, field.name, value, dict(field.metadata))
