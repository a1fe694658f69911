"""
A Recurrent Highway Network in your own language model
======================================================

``highwaynet.RHN`` takes what ``nn.LSTM`` takes and returns what it returns, so a model of your own
swaps one for the other: here an embedding, an RHN of recurrence depth 4 (variational dropout on
its states), and a decoder, trained on any text file with truncated backpropagation through time
(the state carried from window to window, detached), gradient clipping and Adam. It prints the
held-out bits per character (the last 5% of the text is held out; up to 20,000 characters of it
are read) and a sample. Without a file it reads the descriptions of the data sets that
scikit-learn ships (43 kB of English: a small text, so the model learns its words and layout only).

.. code-block:: bash

    python examples/rhn_language_model.py [TEXT_FILE] [--depth 4] [--steps 300]

(Tiny Shakespeare, fetched and sha256-checked into ``~/.cache/highwaynet/tinyshakespeare.txt``:
``python -c "from highwaynet.data import load_corpus; load_corpus('tinyshakespeare', download=True)"``.)
"""

import argparse
import math
from pathlib import Path

import torch
from torch import nn

from highwaynet import RHN

# (the docstring is the gallery page's text; sphinx-gallery runs the script without it)
DESCRIPTION = "A Recurrent Highway Network in your own language model"


class CharRHN(nn.Module):
    """Token ids ``(T, B)`` and a state -> next-token logits ``(T, B, vocab)`` and the new state."""

    def __init__(self, vocab: int, hidden: int, depth: int, dropout: float) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.rnn = RHN(hidden, hidden, depth=depth, state_dropout=dropout)  # nn.LSTM(hidden, hidden) fits here too
        self.decode = nn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor, state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        out, state = self.rnn(self.embed(ids), state)
        return self.decode(out), state


def bits_per_char(model: CharRHN, ids: torch.Tensor, window: int) -> float:
    """Mean bits per character over ``ids``, read in order in one stream, the state carried."""
    model.eval()
    total, state = 0.0, None
    with torch.no_grad():
        for i in range(0, len(ids) - 1, window):
            x, y = ids[i:i + window], ids[i + 1:i + window + 1]
            logits, state = model(x[:len(y), None], state)
            total += nn.functional.cross_entropy(logits[:, 0], y, reduction="sum").item()
    model.train()
    return total / (len(ids) - 1) / math.log(2)


def bundled_text() -> str:
    """The descriptions of scikit-learn's bundled data sets (English text that comes with the package)."""
    import sklearn

    return "".join(p.read_text(encoding="utf-8") for p in sorted(
        (Path(sklearn.__file__).parent / "datasets" / "descr").glob("*.rst")))


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("text", type=Path, metavar="TEXT_FILE", nargs="?",
                        help="a text to learn (default: scikit-learn's data set descriptions)")
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--bptt", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)

    text = args.text.read_text(encoding="utf-8", errors="replace") if args.text else bundled_text()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([index[c] for c in text])
    split = int(0.95 * len(ids))
    train_ids, held_out = ids[:split], ids[split:]
    # The training text as `batch` parallel streams (columns), read window by window.
    streams = train_ids[:len(train_ids) // args.batch * args.batch].view(args.batch, -1).t()

    model = CharRHN(len(chars), args.hidden, args.depth, dropout=0.1)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    state, start = None, 0
    for step in range(args.steps):
        if start + args.bptt + 1 > len(streams):
            state, start = None, 0  # the streams' end: start again from their beginning
        x, y = streams[start:start + args.bptt], streams[start + 1:start + args.bptt + 1]
        start += args.bptt
        logits, state = model(x, state)
        state = state.detach()  # truncated BPTT: carry the state, not its history
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step:4}  train {loss.item() / math.log(2):.3f} bits/char")

    print(f"held-out: {bits_per_char(model, held_out[:20_000], args.bptt):.3f} bits/char "
          f"(uniform over {len(chars)} characters: {math.log2(len(chars)):.3f})")
    model.eval()
    prompt = ids[:20]
    with torch.no_grad():
        logits, state = model(prompt[:, None])
        out = []
        for _ in range(200):
            next_id = torch.multinomial(torch.softmax(logits[-1, 0] / 0.8, -1), 1)
            out.append(chars[int(next_id)])
            logits, state = model(next_id[:, None], state)
    print(text[:20] + "".join(out))


if __name__ == "__main__":
    main()
