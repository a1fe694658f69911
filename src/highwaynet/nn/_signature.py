"""The layers' ``extra_repr``, in ``torch.nn``'s style: sizes positional, settings by keyword.

:func:`settings_repr` is every layer's ``extra_repr``: the sizes, then each setting that differs
from its default (``nn.LSTM``'s style), read from the constructor's own signature so that the two
never disagree.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["settings_repr"]


def _show(value: Any) -> str:
    if hasattr(value, "shape") and hasattr(value, "dtype"):  # a tensor: its shape, not its values
        return f"<tensor {tuple(value.shape)}>"
    if callable(value) and not isinstance(value, type):
        return getattr(value, "__name__", type(value).__name__)
    return repr(value)


def _same(value: Any, default: Any) -> bool:
    if isinstance(default, str) and callable(value):  # an activation given by name, held as a function
        from ..functional import activation_name

        return activation_name(value) == default  # (by name: torch.relu is F.relu's "relu" too)
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
        if hasattr(value, "named_modules"):  # a module it wraps: torch prints it as a child
            continue
        if parameter.kind is parameter.POSITIONAL_OR_KEYWORD and parameter.default is parameter.empty:
            parts.append(_show(value))
        elif parameter.default is parameter.empty or not _same(value, parameter.default):
            parts.append(f"{parameter.name}={_show(value)}")
    return ", ".join(parts)
