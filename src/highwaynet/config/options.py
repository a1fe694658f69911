"""The command line's options, made from a configuration's fields: one option per setting.

:func:`add_config_options` walks a configuration (nested ones included: a recipe's ``train``, a
sweep's ``base``) and adds an ``argparse`` option for each field, with the field's default, help
and choices (:func:`~highwaynet.config.setting`). Nothing is parsed into a default: an option the
user does not give leaves the configuration's own value, so that a command given no options runs
exactly the recipe's default configuration, and :meth:`ConfigOptions.build` checks the result in
the configuration's ``__post_init__``, the one place where settings are checked.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ConfigOptions", "Shorthand", "add_config_options"]


@dataclass(frozen=True)
class Shorthand:
    """One option that sets several fields at once (``--dropout`` for a language model's three
    dropouts); a field also given by its own option keeps that value."""

    flag: str
    paths: tuple[str, ...]
    help: str


@dataclass
class ConfigOptions:
    """The options :func:`add_config_options` added, and how to turn parsed arguments into a configuration."""

    default: Any
    flags: dict[str, str]  # field path ("train.lr") -> option ("--lr")
    shorthands: tuple[Shorthand, ...] = ()

    def build(self, args: argparse.Namespace) -> Any:
        """The default configuration with every option the user gave applied, checked (a ``ValueError``
        names the option, as ``--depth``, where the configuration's check named its field)."""
        values = {path: getattr(args, path) for path in self.flags if hasattr(args, path)}
        for shorthand in self.shorthands:
            given = getattr(args, _dest(shorthand.flag), None)
            if given is not None:
                for path in shorthand.paths:
                    values.setdefault(path, given)
        try:
            return _rebuild(self.default, values)
        except ValueError as error:
            message = str(error)
            for name, flag in self._names().items():
                message = re.sub(rf"\b{re.escape(name)}\b", flag, message)
            raise ValueError(message) from None

    def given(self, args: argparse.Namespace) -> list[str]:
        """The options the user gave (``["--lr", "--dropout"]``): an option not given leaves no value in
        ``args`` (its default is the configuration's, applied by :meth:`build`)."""
        return ([flag for path, flag in self.flags.items() if hasattr(args, path)]
                + [s.flag for s in self.shorthands if getattr(args, _dest(s.flag), None) is not None])

    def _names(self) -> dict[str, str]:
        """``"TrainConfig.lr": "--lr"``: how a configuration's check names each field that has an option."""
        names = {}
        for path, flag in self.flags.items():
            parent = self.default
            *parents, leaf = path.split(".")
            for part in parents:
                parent = getattr(parent, part)
            names[f"{type(parent).__name__}.{leaf}"] = flag
        return names


def _dest(flag: str) -> str:
    return "shorthand" + flag


def _rebuild(config: Any, values: dict[str, Any], prefix: str = "") -> Any:
    changes = {}
    for field in dataclasses.fields(config):
        path, current = prefix + field.name, getattr(config, field.name)
        if dataclasses.is_dataclass(current):
            if any(key.startswith(path + ".") for key in values):
                changes[field.name] = _rebuild(current, values, path + ".")
        elif path in values:
            changes[field.name] = values[path]
    # (replace runs __init__, and so __post_init__: the new values are checked there)
    return dataclasses.replace(config, **changes) if changes else config


def _leaves(config: Any, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, Any, Any]]:
    """``(path, field, value, type)`` for each setting of ``config``, nested configurations walked."""
    hints = typing.get_type_hints(type(config))
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            yield from _leaves(value, prefix + field.name + ".")
        elif field.metadata.get("cli", True):
            yield prefix + field.name, field, value, hints[field.name]


def _optional(kind: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``, else ``(kind, False)``."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(kind)) == 2:
            return args[0], True
    return kind, False


def _comma_list(item: Callable[[str], Any], what: str) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        try:
            return [item(v.strip()) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}") from None
    parse.__name__ = f"comma-separated {what}"
    return parse


def _number(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        return kind(text)
    parse.__name__ = "integer" if kind is int else "number"  # (argparse's word in "invalid integer value")
    return parse


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value))
    if isinstance(value, bool):
        return "on" if value else "off"
    return "none" if value is None else str(value)


def add_config_options(parser: argparse.ArgumentParser, default: Any, *, titles: dict[str, str],
                       hide: Sequence[str] = (), shorthands: Sequence[Shorthand] = ()) -> ConfigOptions:
    """Add an option for each setting of ``default`` (a configuration instance) to ``parser``.

    Args:
        parser: the command's parser.
        default: the configuration whose values the options default to (the recipe's default).
        titles: the help's group title for the settings of each nested configuration, by its path
            (``""``: the top level; ``"train"``, ``"base.train"``, ...).
        hide: field paths the command sets itself (a sweep's per-run task, say), given no option.
        shorthands: options that set several fields at once.

    An option is ``--`` and the field's name with dashes (or the setting's ``flag``); a yes/no
    setting gets ``--name`` and ``--no-name``; a list is given comma-separated.
    """
    groups: dict[str, argparse._ArgumentGroup] = {}
    flags: dict[str, str] = {}
    taken = {flag for action in parser._actions for flag in action.option_strings}
    for path, field, value, kind in _leaves(default):
        if path in hide:
            continue
        prefix = path.rpartition(".")[0]
        if prefix not in groups:
            groups[prefix] = parser.add_argument_group(titles.get(prefix, prefix))
        meta = field.metadata
        flag = meta.get("flag") or "--" + field.name.replace("_", "-")
        if flag in taken:
            raise ValueError(f"two settings want the option {flag}: hide one of them ({path})")
        taken.add(flag)
        flags[path] = flag
        help_text = (meta.get("help") or "").replace("%", "%%")
        kind, optional = _optional(kind)
        metavar = meta.get("metavar") or field.name.upper()
        options: dict[str, Any] = {"dest": path, "default": argparse.SUPPRESS, "metavar": metavar}
        if kind is bool:
            options.pop("metavar")
            options["action"] = argparse.BooleanOptionalAction
            shown = "auto" if value is None else _show(value)
        elif typing.get_origin(kind) is list:
            item = typing.get_args(kind)[0]
            options["type"] = _comma_list(item if item is str else _number(item),
                                          {int: "integers", float: "numbers"}.get(item, "values"))
            help_text += ", comma-separated"
            shown = _show(value)
        else:
            options["type"] = kind if kind is str else _number(kind)
            if meta.get("choices"):
                options["choices"] = meta["choices"]
                options.pop("metavar")
            shown = _show(value)
        if meta.get("choices") and typing.get_origin(kind) is list:
            help_text += f" (from {', '.join(meta['choices'])})"
        groups[prefix].add_argument(flag, help=f"{help_text} (default: {shown})", **options)
    for shorthand in shorthands:
        parser.add_argument(shorthand.flag, dest=_dest(shorthand.flag), type=_number(float), default=None,
                            metavar="P", help=shorthand.help)
    return ConfigOptions(default, flags, tuple(shorthands))
