"""Argument checks, in one place, so that every public class and function refuses bad input alike.

As ``torch.nn`` does: a ``TypeError`` for a value of the wrong kind (a ``bool`` or ``"8"`` where a
size is meant, a float tensor where ids are), a ``ValueError`` for a value of the right kind that is
out of range (a size of 0, a NaN gate bias, a state of the wrong shape), each naming the argument and
what it expected. Every message reads ``<name> must be <what>, got <what came>`` (forward checks:
``<Layer> expects <name> ...``), so a user sees the same sentence for the same mistake anywhere.

Checks on a tensor's *values* (lengths, ids) read them into Python, which a traced program cannot
do: while ``torch.compile``, ``torch.export``, ``torch.jit`` or ONNX export trace the caller, or a
CUDA graph is being captured, they are skipped (:func:`tracing`), or become an assertion inside the
program where the tracer keeps one (:func:`check_lengths`). Checks on shapes, dtypes and devices
are metadata and always run.
"""

from __future__ import annotations

import json
import math
import numbers
import operator
import os
import warnings
from collections.abc import Collection
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor, nn

from ._versions import release

__all__ = [
    "autocast_dtype",
    "autocasting",
    "check_broadcast",
    "check_choice",
    "check_device",
    "check_factory",
    "check_finite",
    "check_flag",
    "check_gate_bias",
    "check_ids",
    "check_input",
    "check_int",
    "check_lengths",
    "check_module",
    "check_path",
    "check_probability",
    "check_size",
    "check_sizes",
    "check_state",
    "check_same_device",
    "check_tensor",
    "check_usable_device",
    "describe",
    "dtypes_meet",
    "parse_json",
    "tracing",
    "warn_unused_dropout",
]

# torch.compile keeps an assertion on tensor values in the code it generates from torch 2.10 on
# (before, inductor drops it as a no-op: PyTorch pull request 160677, August 2025).
TRACED_ASSERTS_HOLD = release(torch.__version__) >= (2, 10)


def describe(value: object) -> str:
    """What came, for a message: its type, and its value where that is short (``bool True``,
    ``str '8'``, ``Tensor of shape (2, 3) and dtype torch.float64``)."""
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} {text}"


# -- numbers ------------------------------------------------------------------------------------


def check_int(name: str, value: object, *, minimum: int | None = None, below: int | None = None) -> int:
    """``value`` as an ``int``: an integer (a NumPy one too), not a ``bool``, not a float or a string
    that looks like one; at least ``minimum`` and less than ``below`` where given (an index)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {describe(value)}")
    number = operator.index(value)
    if abs(number) >= 2**63:
        raise ValueError(f"{name} must fit in 64 bits (torch's sizes and indices are int64), got {number}")
    if minimum is not None and below is not None and not minimum <= number < below:
        raise ValueError(f"{name} must be in [{minimum}, {below}), got {number}")
    if minimum is not None and number < minimum:
        what = "positive" if minimum == 1 else f"at least {minimum}"
        raise ValueError(f"{name} must be {what}, got {number}")
    return number


def check_size(name: str, value: object, *, minimum: int = 1) -> int:
    """A size: an ``int`` of at least ``minimum`` (1 unless a size may be empty)."""
    return check_int(name, value, minimum=minimum)


def check_sizes(name: str, value: object, *, minimum: int = 1, length: int | None = None,
                allow_empty: bool = False) -> tuple[int, ...]:
    """Several sizes (a tuple or list of them; ``length`` of them where given)."""
    if isinstance(value, (str, bytes, Tensor)) or not isinstance(value, Collection):
        raise TypeError(f"{name} must be a tuple of ints, got {describe(value)}")
    sizes = tuple(check_size(f"{name}[{i}]", v, minimum=minimum) for i, v in enumerate(value))
    if length is not None and len(sizes) != length:
        raise ValueError(f"{name} must hold {length} sizes, got {len(sizes)}: {sizes}")
    if not sizes and not allow_empty:
        raise ValueError(f"{name} must hold at least one size, got none")
    return sizes


def check_finite(name: str, value: object) -> float:
    """A real, finite number (an ``int`` or ``float``, not a ``bool``, a string or a tensor); returned
    as given, so that a layer's ``repr`` shows what its user wrote."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {describe(value)}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return cast(float, value)  # (an int or a float, as given)


def check_gate_bias(value: object, dtype: object = None, name: str = "gate_bias") -> float:
    """A gate's initial bias: finite, and held by the dtype of the parameters it is written into
    (``dtype``; None: the default dtype), as :func:`check_finite` returns it."""
    bias = check_finite(name, value)
    parameters = dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.get_default_dtype()
    largest = torch.finfo(parameters).max
    if abs(bias) > largest:
        raise ValueError(f"{name} must fit in the parameters' dtype {parameters} (at most {largest:.3g} in size), "
                         f"got {bias}")
    return bias


def check_flag(name: str, value: object) -> bool:
    """A setting that is on or off: a ``bool`` (``"no"``, ``-1`` or ``None`` are not read as one)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {describe(value)}")
    return bool(value)


def check_probability(name: str, value: object) -> float:
    """A dropout probability: a real number in ``[0, 1)``."""
    p = check_finite(name, value)
    if not 0 <= p < 1:
        raise ValueError(f"{name} must be a probability in [0, 1), got {p}")
    return p


def parse_json(text: str | bytes) -> Any:
    """``json.loads(text)``, where a file read from disk is not JSON a ``ValueError`` (``json.JSONDecodeError``),
    nesting too deep for the parser too: a damaged or edited file of ``[[[[...`` is a RecursionError in
    ``json`` itself."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read: the file is damaged") from None


def warn_unused_dropout(dropout: float, num_layers: int) -> None:
    """``nn.LSTM``'s warning, word for word (a filter set for it covers these layers too), for a
    ``dropout`` between stacked layers given to one layer, where it drops nothing."""
    if dropout > 0 and num_layers == 1:
        warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout expects "
                      f"num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
                      stacklevel=3)


def check_choice(name: str, value: object, choices: Collection[str]) -> str:
    """One of the strings ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


# -- objects ------------------------------------------------------------------------------------


def check_module(name: str, value: object) -> nn.Module:
    if not isinstance(value, nn.Module):
        raise TypeError(f"{name} must be an nn.Module, got {describe(value)}")
    return value


def check_path(name: str, value: object) -> Path:
    """A file or folder's path: a ``str`` or an ``os.PathLike`` (a ``pathlib.Path``), a ``~`` at its start made
    the home folder (``os.path.expanduser``), as a shell does and the command line's options do: ``"~/runs"``
    given in Python is never a folder named ``~`` in the working folder. Every public function and class that
    takes a path reads it through this one."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (a str or a pathlib.Path), got {describe(value)}")
    text = os.fspath(value)
    if not isinstance(text, str):  # (an os.PathLike of bytes)
        raise TypeError(f"{name} must be a path (a str or a pathlib.Path), got {describe(value)}")
    if text == "":
        raise ValueError(f"{name} must be a path, got an empty string")
    return Path(os.path.expanduser(text))


def check_device(name: str, value: object) -> torch.device:
    """A device torch knows: a ``torch.device``, a string (``"cpu"``, ``"cuda:1"``) or a CUDA index."""
    if isinstance(value, bool) or not isinstance(value, (str, int, torch.device)):
        raise TypeError(f"{name} must be a torch.device, a string or an index, got {describe(value)}")
    try:
        return torch.device(value)
    except (RuntimeError, ValueError) as error:
        raise ValueError(f"{name} must name a device torch knows, got {value!r} ({error})") from None


def check_usable_device(name: str, value: object) -> torch.device:
    """A device torch knows (:func:`check_device`) that this machine has: a CUDA device where PyTorch has none
    (a CPU-only build, no GPU) or one past the last is refused here, where torch raises an ``AssertionError``
    ("Torch not compiled with CUDA enabled") or "invalid device ordinal" at its first use."""
    where = check_device(name, value)
    if where.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name}={value!r}: this machine has no CUDA device that PyTorch can use "
                         f"(torch.cuda.is_available() is False: a CPU-only build of PyTorch, or no GPU or "
                         f"driver); pass {name}='cpu' or leave {name} out")
    if where.type == "cuda" and where.index is not None and where.index >= torch.cuda.device_count():
        raise ValueError(f"{name}={value!r}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                         f"numbered from 0; pass one of them")
    return where


def check_factory(device: object, dtype: object) -> dict[str, Any]:
    """``{"device": ..., "dtype": ...}`` for a layer's parameters, as ``torch.nn``'s factory
    arguments: a device torch knows (or None) and a floating-point dtype (or None). A CUDA device this
    machine lacks is refused here, where ``torch.nn`` lets an ``AssertionError`` ("Torch not compiled with
    CUDA enabled") or "invalid device ordinal" come from deep inside torch."""
    if device is not None:
        check_usable_device("device", device)
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {describe(dtype)}")
    return {"device": device, "dtype": dtype}


# -- tensors ------------------------------------------------------------------------------------


def _capturing_or_jit() -> bool:
    return (torch.jit.is_tracing() or (torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing())
            or torch.onnx.is_in_onnx_export())


def tracing() -> bool:
    """Whether the caller is being traced (``torch.compile``, ``torch.export``, ``torch.jit``, ONNX
    export) or captured in a CUDA graph: values may not be read into Python then."""
    return torch.compiler.is_compiling() or _capturing_or_jit()


#: torch >= 2.4 asks autocast's state and dtype by device type; 2.3 has one function a device type. Decided here,
#: not by catching the TypeError: inside ``torch.compile`` 2.3's compiler raises its own error for that call.
_AUTOCAST_BY_DEVICE_TYPE = release(torch.__version__) >= (2, 4)


def autocasting(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` (inputs then need not have the parameters' dtype)."""
    if _AUTOCAST_BY_DEVICE_TYPE:
        return bool(torch.is_autocast_enabled(device_type))
    if device_type == "cpu":
        return bool(torch.is_autocast_cpu_enabled())
    return bool(torch.is_autocast_enabled())


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype autocast casts to on ``device_type``, None when it is off there."""
    if not autocasting(device_type):
        return None
    if _AUTOCAST_BY_DEVICE_TYPE:
        return torch.get_autocast_dtype(device_type)
    return torch.get_autocast_cpu_dtype() if device_type == "cpu" else torch.get_autocast_gpu_dtype()


def dtypes_meet(dtype: torch.dtype, other: torch.dtype, device_type: str) -> bool:
    """Whether tensors of ``dtype`` and ``other`` may meet in one product on ``device_type``: the same dtype,
    or under autocast two that it casts (float32 and the half types; autocast leaves float64 alone, so a
    float64 tensor still meets only float64)."""
    if dtype == other:
        return True
    return torch.float64 not in (dtype, other) and autocasting(device_type)


def check_same_device(like_name: str, like: Tensor, **tensors: Tensor | None) -> None:
    """Each of ``tensors`` (None skipped) on ``like``'s device, else a ValueError naming it: the public
    functions' check of tensors that one kernel reads together."""
    for name, t in tensors.items():
        if t is not None and t.device != like.device:
            raise ValueError(f"{name} must be on {like.device}, the device of {like_name}, got {t.device}")


def _expects(owner: str | None, name: str) -> str:
    """The start of a message: ``<owner> expects <name> to be`` in a layer, ``<name> must be`` elsewhere."""
    return f"{owner} expects {name} to be" if owner else f"{name} must be"


def check_tensor(name: str, value: object, *, owner: str | None = None, kind: str | None = "float") -> Tensor:
    """``value`` a tensor, of a floating-point dtype (``kind="float"``), an integer one (``"integer"``:
    ids, lengths) or any (``None``). ``owner``: the layer whose forward checks it, named in the message."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{_expects(owner, name)} a torch.Tensor, got {describe(value)}")
    if kind == "integer" and (value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool):
        raise TypeError(f"{_expects(owner, name)} an integer tensor (torch.long), got dtype {value.dtype}")
    if kind == "float" and not value.dtype.is_floating_point:
        raise TypeError(f"{_expects(owner, name)} a floating-point tensor, got dtype {value.dtype}")
    return value


def check_broadcast(owner: str, **tensors: Tensor) -> torch.Size:
    """The shape the ``tensors`` broadcast to, or a ``ValueError`` naming each one's shape."""
    try:
        return torch.broadcast_shapes(*(t.shape for t in tensors.values()))
    except RuntimeError:
        shapes = ", ".join(f"{name}{tuple(t.shape)}" for name, t in tensors.items())
        raise ValueError(f"{owner}: the shapes do not broadcast together: {shapes}") from None


def first_parameter(module: nn.Module, *, matrices: bool = False) -> Tensor | None:
    """The module's first parameter (``matrices``: its first of two or more dimensions), or None: what
    :func:`check_input` compares an input with. (A loop, not ``next(..., None)``, which torch 2.3's
    compiler cannot trace.)"""
    for parameter in module.parameters():
        if not matrices or parameter.dim() >= 2:
            return parameter
    return None


def check_input(owner: str, name: str, value: object, like: Tensor | None) -> Tensor:
    """A floating-point tensor on ``like``'s device and of its dtype (``like``: the layer's first
    weight), as the layer's matrix products need; under autocast, any dtype that autocast casts (not
    float64: :func:`dtypes_meet`). (``like`` None: any floating-point tensor, for a layer that cannot
    reach its weight while compiled.)"""
    x = check_tensor(name, value, owner=owner)
    if like is None:
        return x
    if x.device != like.device and like.device.type != "meta":
        raise ValueError(f"{owner} expects {name} on {like.device}, where its parameters are, got {x.device}")
    if not dtypes_meet(x.dtype, like.dtype, x.device.type):
        raise TypeError(f"{owner} expects {name} of dtype {like.dtype}, the parameters' dtype, got {x.dtype} "
                        f"(convert one to the other, or run under torch.autocast, which casts float32 but not float64)")
    return x


def check_state(owner: str, name: str, value: object, shape: tuple[int, ...], like: Tensor,
                layout: str | None = None) -> Tensor:
    """A recurrent state of ``shape`` (``layout`` says it in words, ``(num_layers, B, hidden_size)``),
    on the input ``like``'s device and of its dtype, as ``nn.LSTM`` checks its ``(h_0, c_0)``: never
    cast silently. Under autocast, any that autocast casts (not float64)."""
    state = check_tensor(name, value, owner=owner)
    if tuple(state.shape) != tuple(shape):
        what = f"{layout} = {tuple(shape)}" if layout else f"{tuple(shape)}"
        raise ValueError(f"{owner} expects {name} of shape {what}, got {tuple(state.shape)}")
    if state.device != like.device:
        raise ValueError(f"{owner} expects {name} on the input's device {like.device}, got {state.device}")
    if not dtypes_meet(state.dtype, like.dtype, like.device.type):
        raise TypeError(f"{owner} expects {name} of the input's dtype {like.dtype}, got {state.dtype} "
                        f"(as nn.LSTM, a state is not cast)")
    return state


def check_lengths(owner: str, lengths: object, batch: int, steps: int, shortest: int,
                  device: torch.device | None = None) -> Tensor | None:
    """``lengths``: an integer tensor ``(B,)`` (or a list of ints), one length in ``[shortest, steps]``
    per sequence of the batch; returned as a tensor.

    ``device``: the input's. Lengths on the meta device hold no values to read: with an input on the meta
    device too (a model's shapes worked out without memory), only their shape is checked; with an input
    that holds values, they are refused, where torch cannot copy them out.

    While ``torch.compile`` or ``torch.export`` traces (torch >= 2.10), the values are checked by a
    tensor assertion that becomes part of the graph: reading them into Python would break the graph,
    or stop an export. A compiled or exported layer still refuses lengths out of range, with a
    shorter message (a ``RuntimeError``). Older versions read them, and break the graph.
    """
    if lengths is None:
        return None
    if not isinstance(lengths, Tensor):
        if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Collection):
            raise TypeError(f"{owner} expects lengths to be an integer tensor of shape (B,), got {describe(lengths)}")
        lengths = torch.as_tensor([check_int(f"lengths[{i}]", n) for i, n in enumerate(lengths)], dtype=torch.long)
    check_tensor("lengths", lengths, owner=owner, kind="integer")
    if lengths.dtype != torch.long:
        lengths = lengths.long()
    on_meta = lengths.device.type == "meta"
    if on_meta and device is not None and device.type != "meta":
        raise ValueError(f"{owner} expects lengths that hold values (on the CPU or the input's device {device}), "
                         f"got lengths on the meta device")
    shape_ok = lengths.dim() == 1 and lengths.shape[0] == batch
    if TRACED_ASSERTS_HOLD and torch.compiler.is_compiling():  # values are data here; sizes may be symbolic
        if not shape_ok:
            raise ValueError(f"{owner} expects lengths of shape (B,), one per sequence, got {tuple(lengths.shape)}")
        torch._assert_async(((lengths >= shortest) & (lengths <= steps)).all(),
                            f"{owner} expects lengths in [{shortest}, the number of steps]")
    elif not shape_ok or (batch and not on_meta and not _capturing_or_jit()
                          and not shortest <= int(lengths.min()) <= int(lengths.max()) <= steps):
        raise ValueError(f"{owner} expects lengths to give one length in [{shortest}, {steps}] for each of the "
                         f"{batch} sequences of the batch, got "
                         f"{f'shape {tuple(lengths.shape)}' if on_meta else lengths.tolist()}")
    return lengths


def check_ids(owner: str, name: str, value: object, count: int, like: Tensor | None = None, *,
              cpu_ids: bool = False) -> Tensor:
    """Ids into a table of ``count`` rows (a vocabulary): an integer tensor with values in ``[0, count)``,
    returned as ``torch.long`` unless it is ``torch.int`` already (what ``nn.Embedding`` takes).

    ``like``: the table (an embedding's weight), on whose device the ids must be, as ``check_input``
    asks of an input (any device where the table is on the meta device); ``cpu_ids``: ids on the CPU
    too, for a table indexed as a tensor (``table[ids]``), which takes them. Ids on the meta device
    hold no values: a table with values indexed by them reads whatever memory it finds.

    The values are read on the CPU only, and not while traced: on a GPU the embedding's own device-side
    assertion refuses an id out of range without the host waiting for the device at every call.
    """
    ids = check_tensor(name, value, owner=owner, kind="integer")
    if (like is not None and ids.device != like.device and like.device.type != "meta"
            and not (cpu_ids and ids.device.type == "cpu")):
        raise ValueError(f"{owner} expects {name} on {like.device}, where its parameters are, got {ids.device}")
    if ids.dtype not in (torch.long, torch.int):
        ids = ids.long()
    if not tracing() and ids.device.type == "cpu" and ids.numel():
        low, high = (int(v) for v in torch.aminmax(ids))
        if low < 0 or high >= count:
            bad = low if low < 0 else high
            raise ValueError(f"{owner} expects {name} in [0, {count}) (its vocabulary's size), got {bad}")
    return ids
