"""For the ELMo tests: small bilm-tf files written with h5py in the published layout, and an independent
NumPy float64 reference of the TensorFlow computation (bilm-tf's ``bilm/model.py`` and TensorFlow 1.x's
``LSTMCell``, ``ResidualWrapper``, ``dynamic_rnn`` and ``reverse_sequence``), written out here from
those sources' definitions, sharing no code with the package."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np

FILTERS = [[1, 4], [2, 6], [3, 6]]  # 16 filters


def options(*, skip: bool = True, layers: int = 2, projection: int = 6, cells: int = 20, highway: int = 2,
            activation: str = "relu", filters=FILTERS, cell_clip: float | None = 0.5,
            proj_clip: float | None = 0.3, char_dim: int = 4) -> dict:
    lstm = {"use_skip_connections": skip, "projection_dim": projection, "dim": cells, "n_layers": layers}
    if cell_clip is not None:
        lstm["cell_clip"] = cell_clip
    if proj_clip is not None:
        lstm["proj_clip"] = proj_clip
    return {"lstm": lstm, "char_cnn": {"activation": activation, "filters": filters, "n_highway": highway,
                                       "embedding": {"dim": char_dim}, "n_characters": 262,
                                       "max_characters_per_token": 50}}


def write_model(folder: Path, opts: dict, seed: int = 0, scale: float = 0.5) -> tuple[Path, Path, dict]:
    """``options.json`` and ``weights.hdf5`` of random weights in bilm-tf's layout; also the arrays."""
    rng = np.random.default_rng(seed)
    cnn, lstm = opts["char_cnn"], opts["lstm"]
    d, filters = cnn["embedding"]["dim"], cnn["filters"]
    n = sum(f[1] for f in filters)
    p, c = lstm["projection_dim"], lstm["dim"]
    arrays = {"char_embed": rng.uniform(-1, 1, (261, d))}
    for i, (width, count) in enumerate(filters):
        arrays[f"CNN/W_cnn_{i}"] = rng.normal(0, 0.4, (1, width, d, count))
        arrays[f"CNN/b_cnn_{i}"] = rng.normal(0, 0.1, count)
    for k in range(cnn.get("n_highway", 0)):
        arrays[f"CNN_high_{k}/W_carry"] = rng.normal(0, 0.5, (n, n))
        arrays[f"CNN_high_{k}/b_carry"] = rng.normal(0, 0.5, n)
        arrays[f"CNN_high_{k}/W_transform"] = rng.normal(0, 0.5, (n, n))
        arrays[f"CNN_high_{k}/b_transform"] = rng.normal(0, 0.5, n)
    if n != p:
        arrays["CNN_proj/W_proj"] = rng.normal(0, 0.5, (n, p))
        arrays["CNN_proj/b_proj"] = rng.normal(0, 0.1, p)
    for direction in (0, 1):
        for layer in range(lstm["n_layers"]):
            cell = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            arrays[f"{cell}/W_0"] = rng.normal(0, scale, (2 * p, 4 * c))
            arrays[f"{cell}/B"] = rng.normal(0, 0.5, 4 * c)
            if p < c:
                arrays[f"{cell}/W_P_0"] = rng.normal(0, scale, (c, p))
    arrays = {k: v.astype(np.float32) for k, v in arrays.items()}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "options.json").write_text(json.dumps(opts))
    with h5py.File(folder / "weights.hdf5", "w") as f:
        for name, value in arrays.items():
            f.create_dataset(name, data=value)
    return folder / "options.json", folder / "weights.hdf5", arrays


def char_ids(sentences: list[list[str]], width: int = 50) -> np.ndarray:
    """bilm-tf's Batcher: bytes 0-255, 256 <S>, 257 </S>, 258 begin word, 259 end word, 260 padding, all + 1."""
    def word(token: str) -> list[int]:
        row = [260] * width
        if token in ("<S>", "</S>"):
            row[0], row[1], row[2] = 258, 256 if token == "<S>" else 257, 259
            return row
        body = token.encode("utf-8", "ignore")[: width - 2]
        row[0] = 258
        for k, b in enumerate(body, start=1):
            row[k] = b
        row[len(body) + 1] = 259
        return row

    out = np.zeros((len(sentences), max(len(s) for s in sentences) + 2, width), dtype=np.int64)
    for i, s in enumerate(sentences):
        out[i, : len(s) + 2] = np.array([word("<S>"), *(word(t) for t in s), word("</S>")]) + 1
    return out


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class TensorFlowReference:
    """bilm-tf's biLM in float64 NumPy, stateful as ``BidirectionalLanguageModelGraph`` (rows of the
    state variables past the batch kept)."""

    def __init__(self, opts: dict, arrays: dict) -> None:
        self.opts, self.a = opts, {k: v.astype(np.float64) for k, v in arrays.items()}
        lstm = opts["lstm"]
        self.p, self.c, self.layers = lstm["projection_dim"], lstm["dim"], lstm["n_layers"]
        self.cell_clip, self.proj_clip = lstm.get("cell_clip"), lstm.get("proj_clip")
        self.skip = lstm["use_skip_connections"]
        # state variables: [direction][layer] = (c, m), rows grow as wider batches come
        self.state = {(d, k): (np.zeros((0, self.c)), np.zeros((0, self.p))) for d in (0, 1)
                      for k in range(self.layers)}
        self.clipped_cells = self.clipped_outputs = 0

    def token_embedding(self, ids: np.ndarray) -> np.ndarray:
        cnn = self.opts["char_cnn"]
        table = np.vstack([np.zeros((1, self.a["char_embed"].shape[1])), self.a["char_embed"]])
        x = table[ids]  # (B, T, 50, d)
        act = np.tanh if cnn["activation"] == "tanh" else (lambda v: np.maximum(v, 0.0))
        pooled = []
        for i, (width, _) in enumerate(cnn["filters"]):
            w, b = self.a[f"CNN/W_cnn_{i}"][0], self.a[f"CNN/b_cnn_{i}"]  # (width, d, n)
            windows = x.shape[2] - width + 1
            conv = sum(np.einsum("btpd,dn->btpn", x[:, :, k:k + windows], w[k]) for k in range(width)) + b
            pooled.append(act(conv.max(axis=2)))  # tf.nn.max_pool over every window, then the activation
        h = np.concatenate(pooled, axis=-1)
        for k in range(cnn.get("n_highway", 0)):
            g = f"CNN_high_{k}/"
            carry = sigmoid(h @ self.a[g + "W_carry"] + self.a[g + "b_carry"])
            transform = np.maximum(h @ self.a[g + "W_transform"] + self.a[g + "b_transform"], 0.0)
            h = carry * transform + (1.0 - carry) * h
        if "CNN_proj/W_proj" in self.a:
            h = h @ self.a["CNN_proj/W_proj"] + self.a["CNN_proj/b_proj"]
        return h

    def cell(self, direction: int, layer: int, x, c_prev, m_prev):
        """TensorFlow's LSTMCell.call, forget_bias 1.0."""
        name = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell/"
        z = np.concatenate([x, m_prev], axis=-1) @ self.a[name + "W_0"] + self.a[name + "B"]
        i, j, f, o = np.split(z, 4, axis=-1)
        c = sigmoid(f + 1.0) * c_prev + sigmoid(i) * np.tanh(j)
        if self.cell_clip is not None:
            self.clipped_cells += int((np.abs(c) > self.cell_clip).sum())
            c = np.clip(c, -self.cell_clip, self.cell_clip)
        m = sigmoid(o) * np.tanh(c)
        if name + "W_P_0" in self.a:
            m = m @ self.a[name + "W_P_0"]
            if self.proj_clip is not None:
                self.clipped_outputs += int((np.abs(m) > self.proj_clip).sum())
                m = np.clip(m, -self.proj_clip, self.proj_clip)
        return c, m

    @staticmethod
    def reverse_sequence(x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        out = x.copy()
        for b, n in enumerate(lengths):
            out[b, :n] = x[b, :n][::-1]
        return out

    def __call__(self, ids: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        mask = (ids > 0).any(-1)
        lengths = mask.sum(1)
        batch, steps = mask.shape
        e = self.token_embedding(ids)
        layers = [np.concatenate([e, e], -1)]
        outputs = {0: [], 1: []}
        for direction in (0, 1):
            inputs = e if direction == 0 else self.reverse_sequence(e, lengths)
            for layer in range(self.layers):
                c_var, m_var = self.state[direction, layer]
                if c_var.shape[0] < batch:  # (the variable holds max_batch_size rows, zeros at first)
                    c_var = np.vstack([c_var, np.zeros((batch - c_var.shape[0], self.c))])
                    m_var = np.vstack([m_var, np.zeros((batch - m_var.shape[0], self.p))])
                c, m = c_var[:batch].copy(), m_var[:batch].copy()
                out = np.zeros((batch, steps, self.p))
                for t in range(steps):
                    c_new, m_new = self.cell(direction, layer, inputs[:, t], c, m)
                    if self.skip and layer > 0:  # ResidualWrapper: the cell's input added to its output
                        m_out = m_new + inputs[:, t]
                    else:
                        m_out = m_new
                    running = (t < lengths)[:, None]  # dynamic_rnn: zeros out and the state copied past the end
                    out[:, t] = np.where(running, m_out, 0.0)
                    c, m = np.where(running, c_new, c), np.where(running, m_new, m)
                c_var, m_var = c_var.copy(), m_var.copy()
                c_var[:batch], m_var[:batch] = c, m
                self.state[direction, layer] = (c_var, m_var)
                outputs[direction].append(out if direction == 0 else self.reverse_sequence(out, lengths))
                inputs = out
        for layer in range(self.layers):
            layers.append(np.concatenate([outputs[0][layer], outputs[1][layer]], -1))
        return layers, mask
