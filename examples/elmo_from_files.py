"""
ELMo from bilm-tf's files, without AllenNLP
===========================================

ELMo and SeqVec were published as bilm-tf's ``options.json`` and ``weights.hdf5``.
:meth:`highwaynet.elmo.ELMoBiLM.from_files` loads such a pair into highwaynet's layers (the character
CNN and its highway layers, then the LSTMs with projection and clipping) and computes what bilm-tf
computes. The published models are hundreds of megabytes, so this script writes a small biLM of
random weights in the same layout first (``save_files``) and loads it back; with the real files,
pass their paths instead (``highwaynet.elmo.download_model("original", download=True)`` fetches
them).

It then embeds sentences and a protein sequence, shows that the biLM is *stateful* as the original
(the same sentence twice gives different vectors until the states are reset), and mixes the layers
for a downstream model with :class:`highwaynet.elmo.ELMo`.

.. code-block:: bash

    pip install ".[elmo]"       # in highwaynet's clone: h5py
    python examples/elmo_from_files.py
"""

import argparse
import tempfile
from pathlib import Path

import torch

from highwaynet.elmo import ELMo, ELMoBiLM, batch_to_ids


def main() -> None:
    parser = argparse.ArgumentParser(description="ELMo from bilm-tf's files, on a small random model")
    parser.add_argument("--options", help="a real options.json (with --weights); default: a small random biLM")
    parser.add_argument("--weights", help="a real weights.hdf5")
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        if args.options and args.weights:
            options, weights = Path(args.options), Path(args.weights)
        else:  # a small biLM in the published layout: 2 layers of 64 cells projected to 16, two highway layers
            small = ELMoBiLM(16, 64, 2, filters=((1, 8), (2, 8), (3, 16)), num_highway=2, char_dim=8)
            options, weights = small.save_files(folder)
        print(f"options: {' '.join(options.read_text().split())[:100]}...")
        bilm = ELMoBiLM.from_files(options, weights)
    print(f"loaded a biLM of {sum(p.numel() for p in bilm.parameters()):,} parameters, frozen: "
          f"{not any(p.requires_grad for p in bilm.parameters())}")

    # %%
    # Sentences: lists of tokens (or strings, split at white space); <S> and </S> are added.
    sentences = [["The", "cat", "sat", "on", "the", "mat", "."], ["Highway", "networks", "!"]]
    ids = batch_to_ids(sentences)
    layers, mask = bilm(ids)
    print(f"ids {tuple(ids.shape)}; {len(layers)} layers of {tuple(layers[0].shape)}; tokens per row "
          f"{mask.sum(1).tolist()} (boundaries included)")

    # %%
    # Stateful, as the original: row b starts from the state row b ended in at the last call.
    again, _ = bilm(ids)
    print(f"the same batch again: top layer changed by {(again[-1] - layers[-1]).abs().max():.4f}")
    bilm.reset_states()
    fresh, _ = bilm(ids)
    print(f"after reset_states(): changed by {(fresh[-1] - layers[-1]).abs().max():.4f}")

    # %%
    # A protein, as SeqVec reads it: one residue a token; SeqVec's per-residue vector sums the layers.
    protein = "MKVLAAGIVALLLAAGCSSS"
    layers, _ = bilm(batch_to_ids([list(protein)]))
    residues = torch.stack(layers)[:, 0, 1:-1].sum(0)
    print(f"protein of {len(protein)} residues: per-residue vectors {tuple(residues.shape)}, per-protein "
          f"{tuple(residues.mean(0).shape)}")

    # %%
    # ELMo for a downstream model: a learned mix of the layers, the boundaries removed, dropout.
    elmo = ELMo(bilm, num_outputs=2, dropout=0.5, layer_norm=True)
    (first, second), mask = elmo(ids)
    trainable = [name for name, p in elmo.named_parameters() if p.requires_grad]
    print(f"ELMo: 2 outputs of {tuple(first.shape)}, mask {tuple(mask.shape)}; trainable: {trainable}")


if __name__ == "__main__":
    main()
