"""The generic path: any diffusers transformer of a supported family, sequence-parallel and exact
(docs/model.md, "Families and the generic path")."""

from .build import load_diffusers, random_diffusers, read_config, transformer_folder
from .plans import split_plan
from .runner import GenericSharded, verify_generic
from .sequence_parallel import SequenceParallel

__all__ = ["load_diffusers", "random_diffusers", "read_config", "transformer_folder", "split_plan",
           "GenericSharded", "verify_generic", "SequenceParallel"]
