"""The layers' constructor conventions, as ``torch.nn``'s: sizes positional, settings by keyword.

Two helpers keep every layer alike:

- :func:`keyword_settings` lets an ``__init__`` written in that style still take highwaynet 0.1's
  call forms, where settings went by position, for one release, with a ``DeprecationWarning`` that
  says what to write instead;
- :func:`settings_repr` is every layer's ``extra_repr``: the sizes, then each setting that differs
  from its default (``nn.LSTM``'s style), read from the constructor's own signature so that the
  two never disagree.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

__all__ = ["keyword_settings", "settings_repr"]

P = ParamSpec("P")
R = TypeVar("R")


def keyword_settings(old_order: tuple[str, ...], moved: str | None = None
                     ) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate an ``__init__`` whose settings are keyword-only so that 0.1's positional forms still work.

    Args:
        old_order: 0.1's positional order of the parameters (``self`` excluded).
        moved: a parameter that 0.1 took at a position where the new signature has another
            positional parameter (the RHN's ``depth``, third in 0.1, where ``num_layers`` now is): a
            call that passes that position but not ``moved`` by keyword is read as 0.1 read it.

    A call is read in 0.1's order when it passes more positional arguments than the new signature
    takes, or (``moved``) as said above; the warning names the keywords to use.
    """
    def decorate(init: Callable[P, R]) -> Callable[P, R]:
        signature = inspect.signature(init)
        positional = [p.name for p in signature.parameters.values()
                      if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD][1:]  # (without self)
        position_of_moved = old_order.index(moved) if moved is not None else None

        @functools.wraps(init)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            self, given = args[0], args[1:]
            old_form = len(given) > len(positional) or (
                position_of_moved is not None and moved not in kwargs and len(given) > position_of_moved)
            if not old_form:
                return init(*args, **kwargs)
            name = type(self).__name__
            if len(given) > len(old_order):
                raise TypeError(f"{name}() takes at most {len(old_order)} positional arguments, got {len(given)}")
            mapped = dict(zip(old_order, given, strict=False))
            twice = sorted(set(mapped) & set(kwargs))
            if twice:
                raise TypeError(f"{name}() got multiple values for {', '.join(twice)}")
            by_keyword = [k for k in mapped if k not in positional or positional.index(k) != old_order.index(k)]
            warnings.warn(
                f"{name}: passing {', '.join(by_keyword)} by position is deprecated since highwaynet 0.2 and "
                f"stops working in 0.3; pass {', '.join(f'{k}={mapped[k]!r}' for k in by_keyword)} by keyword "
                f"(the signature is {name}{_public(signature)}, as torch.nn's layers: sizes by position, "
                f"settings by keyword)", DeprecationWarning, stacklevel=2)
            return init(self, **mapped, **kwargs)  # type: ignore[arg-type]

        return wrapper

    return decorate


def _public(signature: inspect.Signature) -> str:
    """``(input_size, hidden_size, num_layers=1, *, depth=4, ...)``: the signature without ``self`` and types."""
    parameters = [p.replace(annotation=inspect.Parameter.empty) for p in list(signature.parameters.values())[1:]]
    return str(signature.replace(parameters=parameters, return_annotation=inspect.Signature.empty))


def _show(value: Any) -> str:
    if hasattr(value, "shape") and hasattr(value, "dtype"):  # a tensor: its shape, not its values
        return f"<tensor {tuple(value.shape)}>"
    if callable(value) and not isinstance(value, type):
        return getattr(value, "__name__", type(value).__name__)
    return repr(value)


def _same(value: Any, default: Any) -> bool:
    if isinstance(default, str) and callable(value):  # an activation given by name, held as a function
        from ..functional import ACTIVATIONS

        return ACTIVATIONS.get(default) is value
    try:
        return bool(value == default)
    except (TypeError, ValueError, RuntimeError):
        return value is default


def settings_repr(module: Any, **current: Any) -> str:
    """``extra_repr`` in ``nn.LSTM``'s style: the constructor's positional sizes, then ``name=value``
    for each keyword setting that differs from its default.

    Values are read from the module's attribute of the parameter's name, or from ``current`` where
    the module keeps a setting in another form (a dropout as a module, say). ``device`` and
    ``dtype`` are left out: the parameters show them.
    """
    signature = inspect.signature(type(module).__init__)
    parts = []
    for parameter in list(signature.parameters.values())[1:]:
        if parameter.name in ("device", "dtype") or parameter.kind in (parameter.VAR_POSITIONAL,
                                                                       parameter.VAR_KEYWORD):
            continue
        value = current[parameter.name] if parameter.name in current else getattr(module, parameter.name)
        if parameter.kind is parameter.POSITIONAL_OR_KEYWORD and parameter.default is parameter.empty:
            parts.append(_show(value))
        elif parameter.default is parameter.empty or not _same(value, parameter.default):
            parts.append(f"{parameter.name}={_show(value)}")
    return ", ".join(parts)
