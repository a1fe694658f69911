r"""ELMo's bidirectional language model: the character encoder, then LSTMs with projection and clipping.

:class:`ELMoBiLM` is bilm-tf's ``BidirectionalLanguageModel`` (``bilm/model.py``) in PyTorch:

- **token vectors**: each token's 50 character ids through :class:`~highwaynet.nn.CharCNNHighway`
  (its ``pool="all"``: bilm-tf max-pools each filter over every window of the 50 positions, then
  applies relu or tanh), then :class:`~highwaynet.nn.Highway` layers (bilm-tf's ``carry_gate`` is
  :math:`\sigma(x W_{carry} + b_{carry})` multiplying :math:`\mathrm{relu}(x W_{transform} + b_{transform})`,
  highwaynet's transform gate ``T`` as it is) and a projection to ``projection_dim``;
- **layer 0** is each token vector twice, ``[e | e]``, one copy per direction;
- **layer l** is ``[forward | backward]``, the outputs of the two directions' ``l``-th
  :class:`ProjectedLSTM`; the backward one reads each sentence reversed within its own length (bilm-tf's
  ``tf.reverse_sequence``), and both hold zeros past a sentence's end (``tf.nn.dynamic_rnn`` with
  ``sequence_length``); above the first layer each direction's output adds its input
  (``tf.nn.rnn_cell.ResidualWrapper``) when ``skip_connections``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor, nn

from .._checks import (
    check_choice,
    check_factory,
    check_finite,
    check_flag,
    check_input,
    check_int,
    check_path,
    check_same_device,
    check_size,
    check_sizes,
    check_state,
    check_tensor,
    describe,
)
from .._files import check_replaceable, folder_held, private_folder, replace_all
from ..kernels.dispatch import note
from ..kernels.lstmp import choose_path, lstmp_recurrence
from ..nn import CharCNNHighway
from ..nn._signature import settings_repr
from .chars import MAX_CHARACTERS, NUM_IDS, check_max_characters, word_to_ids
from .files import ELMoOptions, read_options, read_weights

__all__ = ["ELMO_FILTERS", "ELMoBiLM", "ProjectedLSTM"]

#: The published ELMo models' character filters: ``(width, count)``, 2,048 in all (SeqVec's too).
ELMO_FILTERS: tuple[tuple[int, int], ...] = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))


def _check_mask(mask: Tensor, where: str) -> Tensor:
    """Each row's length, where ``mask`` (B, T) is True on a prefix of each row (else ValueError; not
    checked while compiling, where reading a tensor's values would break the graph)."""
    lengths = mask.sum(1)
    if torch.compiler.is_compiling():
        return lengths
    positions = torch.arange(mask.shape[1], device=mask.device)
    if not torch.equal(mask, positions < lengths[:, None]):
        raise ValueError(f"{where}: each sentence's tokens must come first in its row and padding after them; a row "
                         f"has padding (a row of zero ids) between tokens")
    return lengths


def _check_clip(name: str, bound: object) -> float | None:
    """A clipping bound: None (no clipping) or a positive finite number."""
    if bound is None:
        return None
    value = float(check_finite(name, bound))
    if value <= 0:
        raise ValueError(f"{name} must be None (no clipping) or positive, got {bound}")
    return value


def _reverse_within(x: Tensor, lengths: Tensor) -> Tensor:
    """Each row ``b`` of ``x`` (B, T, F) with its first ``lengths[b]`` steps in reverse order, the rest kept
    (``tf.reverse_sequence``); its own inverse."""
    positions = torch.arange(x.shape[1], device=x.device)
    index = torch.where(positions < lengths[:, None], lengths[:, None] - 1 - positions, positions)
    return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


class ProjectedLSTM(nn.Module):
    r"""One direction of one layer of ELMo's biLM: TensorFlow's ``LSTMCell`` with a projection and
    clipping, its input products taken out of the loop over time.

    .. math::
        [i \mid j \mid f \mid o] = x_t W_{ih}^\top + h_{t-1} W_{hh}^\top + b, \qquad
        c_t = \operatorname{clip}_{c}\big(\sigma(f + f_b)\, c_{t-1} + \sigma(i) \tanh(j)\big), \qquad
        h_t = \operatorname{clip}_{h}\big((\sigma(o) \tanh(c_t))\, W_{proj}^\top\big)

    (gates in TensorFlow's order ``i, j, f, o``: input, candidate, forget, output; ``f_b`` the
    ``forget_bias`` added at run time, 1 as TensorFlow's; the cell clipped after its update, the
    projected output after the projection).

    Args:
        input_size: the input's width.
        hidden_size: the output's (and recurrent state's) width ``P``.
        cell_size: the cell's width ``C``; ``hidden_size < cell_size`` projects, ``hidden_size ==
            cell_size`` does not (bilm-tf's ``num_proj`` is then unset, and ``proj_clip`` unused).
        cell_clip, proj_clip: the bounds, or None. Default: None.
        forget_bias: added to the forget gate's pre-activation. Default: 1.0.
        reverse: read each sequence from its last valid step to its first (outputs returned in the
            input's order). Default: False.
        device, dtype: where and in what type the parameters are made.

    Shape:
        - Input: ``x`` ``(B, T, input_size)``, ``mask`` ``(B, T)`` bool (True on each row's first
          steps; None: all), ``state`` ``(h, c)`` of ``(B, P)`` and ``(B, C)`` (None: zeros).
        - Output: ``(output, (h, c))``: ``(B, T, P)``, zeros past each row's length, and each row's
          final state.

    The loop runs in :func:`highwaynet.kernels.lstmp.lstmp_recurrence`: C++ on the CPU without
    gradients; on a GPU without gradients, where opted in (``HIGHWAYNET_PERSISTENT=1``), the persistent
    kernel within its limits; PyTorch operations otherwise (:func:`highwaynet.kernels.explain` says which).

    Example::

        >>> lstm = ProjectedLSTM(8, 4, 16, cell_clip=3.0, proj_clip=3.0)
        >>> out, (h, c) = lstm(torch.randn(2, 5, 8))
        >>> out.shape, h.shape, c.shape
        (torch.Size([2, 5, 4]), torch.Size([2, 4]), torch.Size([2, 16]))
    """

    def __init__(self, input_size: int, hidden_size: int, cell_size: int, *, cell_clip: float | None = None,
                 proj_clip: float | None = None, forget_bias: float = 1.0, reverse: bool = False,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        input_size, hidden_size = check_size("input_size", input_size), check_size("hidden_size", hidden_size)
        cell_size = check_size("cell_size", cell_size)
        if hidden_size > cell_size:
            raise ValueError(f"ProjectedLSTM: hidden_size ({hidden_size}) must not exceed cell_size ({cell_size}): "
                             f"the projection maps the cell down")
        cell_clip, proj_clip = _check_clip("cell_clip", cell_clip), _check_clip("proj_clip", proj_clip)
        forget_bias, reverse = check_finite("forget_bias", forget_bias), check_flag("reverse", reverse)
        factory: dict[str, Any] = check_factory(device, dtype)
        self.input_size, self.hidden_size, self.cell_size = input_size, hidden_size, cell_size
        self.cell_clip, self.proj_clip = cell_clip, proj_clip
        self.forget_bias, self.reverse = float(forget_bias), reverse
        self.weight_ih = nn.Parameter(torch.empty(4 * cell_size, input_size, **factory))
        self.weight_hh = nn.Parameter(torch.empty(4 * cell_size, hidden_size, **factory))
        self.bias = nn.Parameter(torch.empty(4 * cell_size, **factory))
        self.weight_proj = (nn.Parameter(torch.empty(hidden_size, cell_size, **factory))
                            if hidden_size < cell_size else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Uniform in ``±1/sqrt(cell_size)``, as ``nn.LSTM``; the bias 0 (the forget bias is added at run time)."""
        bound = self.cell_size ** -0.5
        for weight in (self.weight_ih, self.weight_hh, self.weight_proj):
            if weight is not None:
                nn.init.uniform_(weight, -bound, bound)
        nn.init.zeros_(self.bias)

    def forward(self, x: Tensor, mask: Tensor | None = None,
                state: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        check_input("ProjectedLSTM", "x", x, self.weight_ih)
        if x.dim() != 3 or x.shape[-1] != self.input_size:
            raise ValueError(f"ProjectedLSTM expects x of shape (B, T, {self.input_size}), got {tuple(x.shape)}")
        batch, steps, _ = x.shape
        lengths = None
        if mask is not None:
            check_tensor("mask", mask, owner="ProjectedLSTM", kind=None)
            if mask.shape != (batch, steps) or mask.dtype != torch.bool:
                raise ValueError(f"ProjectedLSTM expects mask a bool tensor of shape ({batch}, {steps}), got "
                                 f"{describe(mask)}")
            check_same_device("x", x, mask=mask)
            lengths = _check_mask(mask, "ProjectedLSTM")
        if state is None:
            h0 = x.new_zeros(batch, self.hidden_size)
            c0 = x.new_zeros(batch, self.cell_size)
        else:
            if not isinstance(state, (tuple, list)) or len(state) != 2:
                raise TypeError(f"ProjectedLSTM expects state to be a tuple (h, c), got {describe(state)}")
            h0 = check_state("ProjectedLSTM", "state[0] (h)", state[0], (batch, self.hidden_size), x,
                             "(B, hidden_size)")
            c0 = check_state("ProjectedLSTM", "state[1] (c)", state[1], (batch, self.cell_size), x, "(B, cell_size)")
        if batch == 0 or steps == 0:  # (nothing to run: the states go through unchanged)
            return x.new_zeros(batch, steps, self.hidden_size), (h0, c0)
        if self.reverse:
            x = _reverse_within(x, lengths if lengths is not None else x.new_full((batch,), steps, dtype=torch.long))
        # the input term of every step at once, the forget bias added (on the device: no copy from the
        # host, which a CUDA graph could not capture): one product for the window
        bias = self.bias.clone()
        bias[2 * self.cell_size:3 * self.cell_size] += self.forget_bias
        gates = torch.addmm(bias, x.transpose(0, 1).reshape(steps * batch, -1), self.weight_ih.t())
        gates = gates.view(steps, batch, -1)
        if lengths is not None and not torch.compiler.is_compiling() and bool((lengths == steps).all()):
            lengths = None  # (every row full: no mask for any path to apply)
        path = note(self, choose_path(gates, self.weight_hh, self.weight_proj, h0, c0)).path
        out, h, c = lstmp_recurrence(gates, self.weight_hh, self.weight_proj, h0, c0, lengths,
                                     cell_clip=self.cell_clip, proj_clip=self.proj_clip, path=path,
                                     overwrite_gates=True)
        out = out.transpose(0, 1)
        if self.reverse:
            out = _reverse_within(out, lengths if lengths is not None else x.new_full((batch,), steps,
                                                                                      dtype=torch.long))
        return out, (h, c)

    def extra_repr(self) -> str:
        return settings_repr(self)


class ELMoBiLM(nn.Module):
    r"""ELMo's bidirectional language model (Peters et al., 2018), exact to bilm-tf's computation, as
    published for ELMo and SeqVec: load it with :meth:`from_files`.

    The defaults are the original ELMo's sizes (93.6 M parameters). See the module's description for
    what each part computes and where each fact comes from.

    Args:
        projection_dim: the token vectors' and each direction's output width ``P``. Default: 512.
        cell_dim: the LSTM cells' width ``C``. Default: 4096.
        num_layers: LSTM layers per direction. Default: 2.
        filters: ``(width, count)`` of the character convolutions. Default: :data:`ELMO_FILTERS`.
        num_highway: highway layers. Default: 2.
        char_dim: the character embedding's width. Default: 16.
        activation: the convolutions' ``"relu"`` or ``"tanh"``. Default: ``"relu"``.
        max_characters: character ids per token, 4 to 10,000. Default: 50.
        cell_clip, proj_clip: the LSTM's clipping bounds (None: none). Default: 3.0 each.
        skip_connections: residual connections around the layers above the first. Default: True.
        stateful: carry each batch row's LSTM state on to the next call, as the original does (see
            below); False starts every call from zeros. Default: True.
        device, dtype: where and in what type the parameters are made.

    Shape:
        - Input: ``ids`` ``(B, T, max_characters)`` int64 from :func:`~highwaynet.elmo.batch_to_ids`
          (sentence boundaries included; rows of zeros past each sentence's end).
        - Output: ``(layers, mask)``: ``num_layers + 1`` tensors ``(B, T, 2 P)`` (layer 0 the token
          vectors ``[e | e]``; zeros past each sentence's end in every layer) and ``mask`` ``(B, T)`` bool.

    **Stateful, as the original.** bilm-tf keeps each LSTM's final state in a variable of
    ``max_batch_size`` rows and starts the next batch's row ``b`` from row ``b``'s state; rows past
    the batch keep theirs, and a row of only padding (length 0) carries its state through unchanged
    (``dynamic_rnn`` copies the state past a row's length). The same here, for any number of rows:
    the same sentence gives slightly different vectors depending on what ran before it. Call
    :meth:`reset_states` to start over, or run a few batches first to warm the states up; set
    ``stateful=False`` for vectors that depend on the sentence alone.

    Example::

        >>> from highwaynet.elmo import batch_to_ids
        >>> bilm = ELMoBiLM(16, 32, 2, filters=((1, 8), (2, 8)), num_highway=1, char_dim=4)
        >>> layers, mask = bilm(batch_to_ids([["Hello", "world"], ["Hi"]]))
        >>> len(layers), layers[0].shape, mask.sum(1).tolist()
        (3, torch.Size([2, 4, 32]), [4, 3])
    """

    state_h: Tensor  # the buffers (registered in __init__), declared for type checkers
    state_c: Tensor
    cached_vectors: Tensor

    def __init__(self, projection_dim: int = 512, cell_dim: int = 4096, num_layers: int = 2, *,
                 filters: Sequence[tuple[int, int]] = ELMO_FILTERS, num_highway: int = 2, char_dim: int = 16,
                 activation: str = "relu", max_characters: int = MAX_CHARACTERS, cell_clip: float | None = 3.0,
                 proj_clip: float | None = 3.0, skip_connections: bool = True, stateful: bool = True,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if isinstance(filters, (str, bytes, Tensor)) or not isinstance(filters, Sequence) or not filters:
            raise TypeError(f"filters must be a non-empty sequence of (width, count) pairs, got {describe(filters)}")
        filters = tuple(cast(tuple[int, int], check_sizes(f"filters[{i}]", f, length=2)) for i, f in enumerate(filters))
        projection_dim, cell_dim, num_layers = (check_size("projection_dim", projection_dim),
                                                check_size("cell_dim", cell_dim), check_size("num_layers", num_layers))
        char_dim, max_characters = check_size("char_dim", char_dim), check_max_characters(max_characters)
        num_highway = check_int("num_highway", num_highway, minimum=0)
        activation = check_choice("activation", activation, ("relu", "tanh"))
        cell_clip, proj_clip = _check_clip("cell_clip", cell_clip), _check_clip("proj_clip", proj_clip)
        skip_connections, stateful = check_flag("skip_connections", skip_connections), check_flag("stateful", stateful)
        if projection_dim > cell_dim:
            raise ValueError(f"ELMoBiLM: projection_dim ({projection_dim}) must not exceed cell_dim ({cell_dim}): the "
                             f"projection maps the cell down")
        num_filters = sum(n for _, n in filters)
        if num_filters < projection_dim:
            raise ValueError(f"ELMoBiLM: the filters' total ({num_filters}) must be at least projection_dim "
                             f"({projection_dim}): bilm-tf projects the token vectors down only")
        if max_characters < max((w for w, _ in filters), default=1):
            raise ValueError(f"ELMoBiLM: max_characters ({max_characters}) is narrower than the widest filter")
        factory: dict[str, Any] = check_factory(device, dtype)
        self.projection_dim, self.cell_dim, self.num_layers = projection_dim, cell_dim, num_layers
        self.filters, self.num_highway, self.char_dim, self.activation = filters, num_highway, char_dim, activation
        self.max_characters, self.cell_clip, self.proj_clip = max_characters, cell_clip, proj_clip
        self.skip_connections, self.stateful = skip_connections, stateful
        self.output_size = 2 * projection_dim
        self.token_encoder = CharCNNHighway(
            NUM_IDS, filters=filters, num_highway=num_highway, char_dim=char_dim, activation=activation,
            highway_activation="relu", projection=projection_dim if num_filters != projection_dim else None,
            padding_idx=0, pool="all", **factory)
        self.forward_layers = nn.ModuleList(
            ProjectedLSTM(projection_dim, projection_dim, cell_dim, cell_clip=cell_clip, proj_clip=proj_clip,
                          **factory) for _ in range(num_layers))
        self.backward_layers = nn.ModuleList(
            ProjectedLSTM(projection_dim, projection_dim, cell_dim, cell_clip=cell_clip, proj_clip=proj_clip,
                          reverse=True, **factory) for _ in range(num_layers))
        # the carried states: (layer, direction, row, width); rows grow with the widest batch seen
        self.register_buffer("state_h", torch.zeros(num_layers, 2, 0, projection_dim, **factory), persistent=False)
        self.register_buffer("state_c", torch.zeros(num_layers, 2, 0, cell_dim, **factory), persistent=False)
        self.register_buffer("cached_vectors", torch.zeros(0, projection_dim, **factory), persistent=False)
        self._cache_index: dict[bytes, int] = {}

    # -- loading ---------------------------------------------------------------------------------

    @classmethod
    def from_options(cls, options: str | Path | dict[str, Any] | ELMoOptions, **kwargs: Any) -> ELMoBiLM:
        """A biLM of the sizes in a bilm-tf ``options.json`` (path, dict or :class:`ELMoOptions`), its
        weights random; ``kwargs``: ``stateful``, ``device``, ``dtype``."""
        opts = options if isinstance(options, ELMoOptions) else read_options(options)
        return cls(opts.projection_dim, opts.cell_dim, opts.num_layers, **opts.settings(), **kwargs)

    @classmethod
    def from_files(cls, options: str | Path | dict[str, Any], weights: str | Path, *, stateful: bool = True,
                   device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> ELMoBiLM:
        """The biLM a bilm-tf ``options.json`` and ``weights.hdf5`` describe (ELMo's, SeqVec's), its
        parameters frozen (``requires_grad=False``) and in eval mode.

        Where both files are in one folder, they are read holding its lock shared (POSIX): a :meth:`save_files`
        into that folder meanwhile waits for the reading to end, and the reading for its moves to end, so that
        the two files read are always one save's pair.

        Raises:
            FileNotFoundError: a file is missing.
            ValueError: a file is not what it should be: the options' key, the missing dataset, or the
                dataset whose shape disagrees with the options, named.
            ImportError: h5py, the ``elmo`` extra, is not installed (``pip install h5py``).
        """
        with _pair_held(options, weights):
            opts, arrays = _read_pair(options, weights)
        return cls._from_arrays(opts, arrays, stateful=stateful, device=device, dtype=dtype)

    @classmethod
    def _from_arrays(cls, opts: ELMoOptions, arrays: dict[str, np.ndarray], *, stateful: bool,
                     device: torch.device | str | None, dtype: torch.dtype | None) -> ELMoBiLM:
        """:meth:`from_files`' biLM, of the pair read (:func:`_read_pair`)."""
        bilm = cls.from_options(opts, stateful=stateful, device=device, dtype=dtype)
        bilm.load_state_dict(state_dict_from_arrays(arrays, opts))
        bilm.requires_grad_(False)
        return bilm.eval()

    def options(self) -> dict[str, Any]:
        """This biLM's sizes as a bilm-tf ``options.json`` holds them (what :meth:`from_options` reads)."""
        lstm: dict[str, Any] = {"use_skip_connections": self.skip_connections, "projection_dim": self.projection_dim,
                                "dim": self.cell_dim, "n_layers": self.num_layers}
        lstm.update({k: v for k, v in (("cell_clip", self.cell_clip), ("proj_clip", self.proj_clip)) if v is not None})
        return {"lstm": lstm, "char_cnn": {"activation": self.activation, "filters": [list(f) for f in self.filters],
                                           "n_highway": self.num_highway, "embedding": {"dim": self.char_dim},
                                           "n_characters": NUM_IDS, "max_characters_per_token": self.max_characters}}

    def save_files(self, folder: str | Path) -> tuple[Path, Path]:
        """Write ``options.json`` and ``weights.hdf5`` in bilm-tf's layout into ``folder`` (a fine-tuned biLM
        for bilm-tf, AllenNLP or :meth:`from_files`), in float32; returns their paths.

        Both files are written whole in a hidden folder of this call's own in ``folder`` (``.save_files.*``), then
        each is moved into its place in one step: a reader, or a kill, never meets half of one, and a link in the
        place of either is replaced, never written through. What a save killed before its end left there (its
        folder, with what it had written) is removed by the next save into ``folder``; the folder of a save under
        way in another process is locked (POSIX), and stays.

        The two files are one pair: the moves are made holding ``folder``'s own lock (POSIX ``flock``, exclusive),
        which :meth:`from_files` holds shared while it reads the two. Saves into one folder at once, from threads
        or processes, each write their files side by side, then move them in one after the other, never between
        each other's two moves: the folder is left holding the pair of the save that moved last, never the options
        of one beside the weights of another; and :meth:`from_files` reads the pair before a save's moves, or after
        them, never the new weights beside the old options. (A reader that does not take the lock, bilm-tf's or
        AllenNLP's, may still read between the two moves, microseconds apart; where the OS or the file system has
        no such lock, Windows or some network file systems, nothing is locked, as before.)

        Both places are checked before anything is written, and again before the first move: a folder in the
        place of either file, another user's file where the folder lets only its owner replace it, or a folder
        this user cannot write is refused (the path named, and what to do), nothing changed. The two moves then
        follow each other at once, ``weights.hdf5`` first and ``options.json``, which says what the weights
        are, last: where ``options.json`` is new, so are the weights. Only a kill, or an OS failure, in the
        microseconds between the two moves leaves the new weights beside the old ``options.json``.
        """
        try:
            import h5py
        except ImportError:
            raise ImportError("writing ELMo weights needs h5py, highwaynet's elmo extra: pip install h5py") from None
        folder = check_path("folder", folder)
        if folder.exists() and not folder.is_dir():
            raise FileExistsError(f"save_files writes options.json and weights.hdf5 into a folder, and {folder} is a "
                                  f"file: pass a folder")
        names = ("weights.hdf5", "options.json")  # (in the order they are moved: options.json last)
        check_replaceable([folder / name for name in names], "save_files")  # (before the folder is made)
        folder.mkdir(parents=True, exist_ok=True)
        check_replaceable([folder / name for name in names], "save_files")  # (before the weights are written)
        opts = read_options(self.options())
        state = {k: v.detach().float().cpu() for k, v in self.state_dict().items()}
        arrays = arrays_from_state_dict(state, opts)
        with private_folder(folder, ".save_files.", "", names) as scratch:
            with h5py.File(scratch / "weights.hdf5", "w") as f:
                for name, value in arrays.items():
                    f.create_dataset(name, data=value)
            (scratch / "options.json").write_text(json.dumps(self.options(), indent=1) + "\n")
            with folder_held(folder, shared=False):  # (another save's two moves, or a from_files' reading, first)
                replace_all([(scratch / name, folder / name) for name in names], "save_files")
        return folder / "options.json", folder / "weights.hdf5"

    # -- the state -------------------------------------------------------------------------------

    def reset_states(self) -> None:
        """Forget the carried LSTM states: the next call starts every row from zeros."""
        self.state_h = self.state_h[:, :, :0]
        self.state_c = self.state_c[:, :, :0]

    def _initial_states(self, batch: int, like: Tensor) -> tuple[Tensor, Tensor]:
        h = like.new_zeros(self.num_layers, 2, batch, self.projection_dim)
        c = like.new_zeros(self.num_layers, 2, batch, self.cell_dim)
        if self.stateful:
            rows = min(batch, self.state_h.shape[2])
            h[:, :, :rows] = self.state_h[:, :, :rows]
            c[:, :, :rows] = self.state_c[:, :, :rows]
        return h, c

    def _keep_states(self, h: Tensor, c: Tensor) -> None:
        # New tensors, never written in place: states made under torch.inference_mode() are inference
        # tensors, which a later call outside it could not update in place.
        batch, stored = h.shape[2], self.state_h.shape[2]
        h, c = h.detach(), c.detach()
        if stored > batch:  # the rows past this batch keep their states
            h, c = torch.cat([h, self.state_h[:, :, batch:]], dim=2), torch.cat([c, self.state_c[:, :, batch:]], dim=2)
        self.state_h, self.state_c = h.clone(), c.clone()

    # -- the token vectors -------------------------------------------------------------------------

    def cache_words(self, words: Iterable[str], batch_size: int = 4096) -> None:
        """Compute the token vectors of a known vocabulary once (AllenNLP PR #1347's idea): a token whose
        ids are cached is looked up, not run through the character encoder again. For a frozen encoder
        (the cache is ignored while the encoder's parameters take gradients); it moves with the module."""
        if isinstance(words, (str, bytes)):
            raise TypeError(f"words must be an iterable of words (strings), got {describe(words)}: wrap one word in "
                            f"a list")
        if not isinstance(words, Iterable):
            raise TypeError(f"words must be an iterable of words (strings), got {describe(words)}")
        batch_size = check_size("batch_size", batch_size)
        words = list(words)
        for index, word in enumerate(words):  # (before dict.fromkeys, which would fail on a list: unhashable)
            if not isinstance(word, str):
                raise TypeError(f"cache_words takes words, strings: words[{index}] is {describe(word)}")
            if not word:
                raise ValueError(f"cache_words takes words, non-empty strings: words[{index}] is empty")
        words = list(dict.fromkeys(words))
        ids = torch.tensor([word_to_ids(w, self.max_characters) for w in words], dtype=torch.long).reshape(
            -1, self.max_characters)
        with torch.no_grad():
            vectors = torch.cat([self.token_encoder(part.to(self.state_h.device))
                                 for part in ids.split(batch_size)]) if len(words) else self.cached_vectors[:0]
        self.cached_vectors = vectors
        self._cache_index = {row.tobytes(): i for i, row in enumerate(ids.numpy())}

    def _encode(self, rows: Tensor) -> Tensor:
        """The token vectors of distinct rows of ids, from the cache where it holds them."""
        if not self._cache_index or (torch.is_grad_enabled()
                                     and any(p.requires_grad for p in self.token_encoder.parameters())):
            return self.token_encoder(rows)
        found = [self._cache_index.get(row.tobytes(), -1) for row in rows.cpu().numpy()]
        hit = torch.tensor(found, device=rows.device)
        out = rows.new_zeros(rows.shape[0], self.projection_dim, dtype=self.cached_vectors.dtype)
        cached = hit >= 0
        out[cached] = self.cached_vectors[hit[cached]]
        if not bool(cached.all()):
            out[~cached] = self.token_encoder(rows[~cached])
        return out

    def token_vectors(self, ids: Tensor, mask: Tensor) -> Tensor:
        """The token vectors ``(B, T, P)`` of ``ids`` (zeros where ``mask`` is False), each distinct
        token through the character encoder once."""
        check_tensor("ids", ids, owner="ELMoBiLM.token_vectors", kind="integer")
        check_tensor("mask", mask, owner="ELMoBiLM.token_vectors", kind=None)
        if ids.dim() != 3 or ids.shape[-1] != self.max_characters or mask.dtype != torch.bool \
                or mask.shape != ids.shape[:2]:
            # (a mask of 0s and 1s would index rows 0 and 1, not select the valid ones: wrong vectors, silently)
            raise ValueError(f"ELMoBiLM.token_vectors expects ids (B, T, {self.max_characters}) and mask (B, T), a "
                             f"bool tensor, got {describe(ids)} and {describe(mask)}")
        check_same_device("ids", ids, mask=mask)
        flat, valid = ids.reshape(-1, ids.shape[-1]), mask.reshape(-1)
        if torch.compiler.is_compiling():  # (no data-dependent shapes: every row, then the mask)
            vectors = self.token_encoder(flat) * valid.unsqueeze(-1)
            return vectors.view(*ids.shape[:2], -1)
        rows = flat[valid]
        if rows.shape[0] == 0:
            return flat.new_zeros(*ids.shape[:2], self.projection_dim, dtype=self.cached_vectors.dtype)
        unique, inverse = torch.unique(rows, dim=0, return_inverse=True)
        encoded = self._encode(unique)
        out = encoded.new_zeros(flat.shape[0], encoded.shape[-1])
        out[valid] = encoded[inverse]
        return out.view(*ids.shape[:2], -1)

    # -- the forward -------------------------------------------------------------------------------

    def forward(self, ids: Tensor) -> tuple[list[Tensor], Tensor]:
        check_tensor("ids", ids, owner="ELMoBiLM", kind="integer")
        if ids.dim() != 3 or ids.shape[-1] != self.max_characters:
            raise ValueError(f"ELMoBiLM expects ids, character ids, an integer tensor (B, T, {self.max_characters}) "
                             f"from highwaynet.elmo.batch_to_ids; got {ids.dtype} {tuple(ids.shape)}")
        if ids.device != self.state_h.device:
            raise ValueError(f"ELMoBiLM: ids are on {ids.device} but the model on {self.state_h.device}; move one "
                             f"to the other")
        if ids.numel() and not torch.compiler.is_compiling() and (int(ids.min()) < 0 or int(ids.max()) >= NUM_IDS):
            raise ValueError(f"ELMoBiLM: character ids must lie in 0..{NUM_IDS - 1} (UTF-8 bytes and ELMo's markers, "
                             f"shifted by one); got {int(ids.min())}..{int(ids.max())}: make them with batch_to_ids")
        ids = ids.long()
        mask = (ids > 0).any(-1)
        _check_mask(mask, "ELMoBiLM")
        vectors = self.token_vectors(ids, mask)
        layers = [torch.cat([vectors, vectors], dim=-1)]
        h0, c0 = self._initial_states(ids.shape[0], vectors)
        finals_h, finals_c = [], []
        inputs = [vectors, vectors]
        for layer, pair in enumerate(zip(self.forward_layers, self.backward_layers, strict=True)):
            outputs = []
            for direction, lstm in enumerate(pair):
                out, (h, c) = lstm(inputs[direction], mask, (h0[layer, direction], c0[layer, direction]))
                if self.skip_connections and layer > 0:
                    out = out + inputs[direction]
                outputs.append(out)
                finals_h.append(h)
                finals_c.append(c)
            layers.append(torch.cat(outputs, dim=-1))
            inputs = outputs
        if self.stateful:
            shape = (self.num_layers, 2, ids.shape[0])
            self._keep_states(torch.stack(finals_h).view(*shape, self.projection_dim),
                             torch.stack(finals_c).view(*shape, self.cell_dim))
        return layers, mask

    def extra_repr(self) -> str:
        return settings_repr(self)


def state_dict_from_arrays(arrays: dict[str, np.ndarray], opts: ELMoOptions) -> dict[str, Tensor]:
    """:class:`ELMoBiLM`'s state dict from a weight file's arrays (:func:`~highwaynet.elmo.files.read_weights`).

    TensorFlow multiplies ``x W`` where PyTorch's layers compute ``x W^T``: every matrix is transposed.
    The character embedding gains a row of zeros in front (id 0, the padding past a sentence's end, as
    bilm-tf's loader prepends it); a convolution ``(1, width, char_dim, n)`` becomes ``(n, char_dim,
    width)``; a highway layer's ``[H | T]`` projection is ``[W_transform | W_carry]`` (bilm-tf's carry gate
    multiplies the transform: highwaynet's ``T``, no sign flip); ``W_0`` ``(P + P, 4C)`` splits into the
    input's rows and the recurrent state's.
    """
    def t(name: str) -> Tensor:
        return torch.from_numpy(arrays[name])

    state: dict[str, Tensor] = {}
    embed = t("char_embed")
    state["token_encoder.embedding.weight"] = torch.cat([embed.new_zeros(1, embed.shape[1]), embed])
    for i in range(len(opts.filters)):
        state[f"token_encoder.convs.{i}.weight"] = t(f"CNN/W_cnn_{i}")[0].permute(2, 1, 0).contiguous()
        state[f"token_encoder.convs.{i}.bias"] = t(f"CNN/b_cnn_{i}")
    for k in range(opts.num_highway):
        prefix = f"CNN_high_{k}/"
        state[f"token_encoder.layers.layers.{k}.weight"] = torch.cat(
            [t(prefix + "W_transform").t(), t(prefix + "W_carry").t()]).contiguous()
        state[f"token_encoder.layers.layers.{k}.bias"] = torch.cat([t(prefix + "b_transform"), t(prefix + "b_carry")])
    if "CNN_proj/W_proj" in arrays:
        state["token_encoder.projection.weight"] = t("CNN_proj/W_proj").t().contiguous()
        state["token_encoder.projection.bias"] = t("CNN_proj/b_proj")
    width = opts.projection_dim
    for direction, stack in enumerate(("forward_layers", "backward_layers")):
        for layer in range(opts.num_layers):
            cell = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell/"
            kernel = t(cell + "W_0")  # rows: [x | h]
            state[f"{stack}.{layer}.weight_ih"] = kernel[:width].t().contiguous()
            state[f"{stack}.{layer}.weight_hh"] = kernel[width:].t().contiguous()
            state[f"{stack}.{layer}.bias"] = t(cell + "B")
            if cell + "W_P_0" in arrays:
                state[f"{stack}.{layer}.weight_proj"] = t(cell + "W_P_0").t().contiguous()
    return state


def arrays_from_state_dict(state: dict[str, Tensor], opts: ELMoOptions) -> dict[str, np.ndarray]:
    """The weight file's arrays from :class:`ELMoBiLM`'s state dict: :func:`state_dict_from_arrays` undone."""
    arrays: dict[str, np.ndarray] = {}

    def put(name: str, value: Tensor) -> None:
        arrays[name] = value.contiguous().numpy().astype(np.float32)

    put("char_embed", state["token_encoder.embedding.weight"][1:])
    for i in range(len(opts.filters)):
        put(f"CNN/W_cnn_{i}", state[f"token_encoder.convs.{i}.weight"].permute(2, 1, 0).unsqueeze(0))
        put(f"CNN/b_cnn_{i}", state[f"token_encoder.convs.{i}.bias"])
    for k in range(opts.num_highway):
        transform, carry = state[f"token_encoder.layers.layers.{k}.weight"].chunk(2)
        b_transform, b_carry = state[f"token_encoder.layers.layers.{k}.bias"].chunk(2)
        put(f"CNN_high_{k}/W_carry", carry.t())
        put(f"CNN_high_{k}/b_carry", b_carry)
        put(f"CNN_high_{k}/W_transform", transform.t())
        put(f"CNN_high_{k}/b_transform", b_transform)
    if "token_encoder.projection.weight" in state:
        put("CNN_proj/W_proj", state["token_encoder.projection.weight"].t())
        put("CNN_proj/b_proj", state["token_encoder.projection.bias"])
    for direction, stack in enumerate(("forward_layers", "backward_layers")):
        for layer in range(opts.num_layers):
            cell = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell/"
            put(cell + "W_0", torch.cat([state[f"{stack}.{layer}.weight_ih"], state[f"{stack}.{layer}.weight_hh"]],
                                        dim=1).t())
            put(cell + "B", state[f"{stack}.{layer}.bias"])
            if f"{stack}.{layer}.weight_proj" in state:
                put(cell + "W_P_0", state[f"{stack}.{layer}.weight_proj"].t())
    return arrays


def _read_pair(options: str | Path | dict[str, Any], weights: str | Path) -> tuple[ELMoOptions, dict[str, np.ndarray]]:
    """The options and the weights' arrays of a pair (:meth:`ELMoBiLM.from_files` reads them so); hold
    :func:`_pair_held` around it, and around whatever else must see the same pair (``elmo embed``'s hashes)."""
    opts = read_options(options)
    return opts, read_weights(weights, opts)


def _pair_held(options: object, weights: object) -> AbstractContextManager[bool]:
    """The lock of the folder that holds both ``options`` and ``weights`` (paths), held shared while
    :meth:`ELMoBiLM.from_files` reads them (:meth:`ELMoBiLM.save_files` moves its pair in holding it
    exclusive), or ``elmo embed`` hashes and reads them; none where they are in different folders, or not paths
    (their readers then say what is wrong). Taken once per reading: not again inside it."""
    try:
        folder = check_path("options", options).parent
        same = os.path.samefile(folder, check_path("weights", weights).parent)
    except (TypeError, ValueError, OSError):
        return nullcontext(False)
    return folder_held(folder, shared=True) if same else nullcontext(False)
