"""ELMo and SeqVec without AllenNLP: bilm-tf's published ``options.json`` and ``weights.hdf5`` loaded
into highwaynet's layers, computing what the original computes.

- :func:`batch_to_ids`: sentences to ELMo's character ids (boundaries added);
- :class:`ELMoBiLM`: the biLM (:meth:`ELMoBiLM.from_files`), stateful as the original, its layers and mask;
- :class:`ELMo`: learned scalar mixes of the layers for a downstream model;
- :data:`MODELS` and :func:`download_model`: the published models by name;
- :func:`embed_file`: a file of sentences to an HDF5 file of vectors (``highwaynet elmo embed``).

Reading the weight files needs h5py, the ``elmo`` extra (``pip install h5py``).
"""

from .bilm import ELMO_FILTERS, ELMoBiLM, ProjectedLSTM
from .chars import batch_to_ids
from .files import MODELS, ELMoOptions, download_model, read_options, read_weights
from .mix import ELMo, ScalarMix, remove_sentence_boundaries

__all__ = ["ELMO_FILTERS", "MODELS", "ELMo", "ELMoBiLM", "ELMoOptions", "ProjectedLSTM", "ScalarMix", "batch_to_ids",
           "download_model", "read_options", "read_weights", "remove_sentence_boundaries"]
