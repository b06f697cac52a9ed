"""A diffusers pipeline folder's text encoders and VAE, sized from their safetensors headers (standard
library only; headers only, no tensor is read).

The planner's generate memory estimate (plan/pipeline_estimate.py) counts the parts a generate job
loads. For a folder it reads them here, once per plan, next to the transformer's config.json: each
``text_encoder*`` and ``vae`` component the folder's ``model_index.json`` lists (what diffusers'
``from_pretrained`` loads, e.g. SD3.5's ``text_encoder_3`` where present), its class (the index's
entry) and its parameters (the elements of every tensor its weights file or index holds). A part without safetensors weights (a
``.bin`` file) leaves the sizes unknown: the family's published ones apply (or none).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Optional

from sporch.orchestrator.models.checkpoint_files import CheckpointError, kind, read_header, read_index
from sporch.orchestrator.models.checkpoint_config import read_json_object

#: transformers' and diffusers' weight file names (one file, or an index of shards)
WEIGHT_FILES = ("model.safetensors", "diffusion_pytorch_model.safetensors")
INDEX_FILES = ("model.safetensors.index.json", "diffusion_pytorch_model.safetensors.index.json")
#: a numbered layer in a tensor name, the outermost: ``encoder.block.3.`` (of ``encoder.block.3.layer.1.``),
#: ``model.layers.11.``, ``layers.0.`` (a LlamaModel's own), ``visual.blocks.0.``
_LAYER = re.compile(r"^((?:.*?\.)??(?:layers|layer|block|blocks))\.(\d+)\.")


def _shapes(folder: Path) -> Optional[dict[str, tuple[int, ...]]]:
    """Tensor name -> shape of the weights in ``folder`` (one safetensors file or an index), or None."""
    for name in INDEX_FILES:
        index = folder / name
        if kind(index) == "file":
            shapes: dict[str, tuple[int, ...]] = {}
            for shard in sorted(set(read_index(index).values())):
                if kind(shard) != "file":
                    raise CheckpointError(f"index {index} lists shard {shard.name}, which is missing")
                shapes.update({k: v.shape for k, v in read_header(shard).items()})
            return shapes
    for name in WEIGHT_FILES:
        if kind(folder / name) == "file":
            return {k: v.shape for k, v in read_header(folder / name).items()}
    return None


def _class_name(entry: Any) -> Optional[str]:
    """The class a model_index.json entry names (``["transformers", "T5EncoderModel"]``), or None."""
    if isinstance(entry, list) and len(entry) == 2 and entry[1]:
        return str(entry[1])
    return None


def read_pipeline_sizes(root: str | Path) -> Optional[dict[str, Any]]:
    """``{text_encoder, text_encoder_parameters, text_encoder_layers, text_encoder_embedding,
    text_encoder_layer, vae, vae_parameters}`` (the keys of a family's ``PARTS``: classes joined by
    " + ", parameters summed, numbered layers counted, the largest vocabulary embedding, the largest
    layer's parameters) of the pipeline folder ``root``'s text encoders and VAE,
    or None (no model_index.json, no VAE or text encoder listed, or one without
    safetensors weights)."""
    root = Path(root)
    if kind(root / "model_index.json") != "file":
        return None
    index = read_json_object(root / "model_index.json")
    encoders, vae = [], None
    for sub in sorted(k for k in index if isinstance(k, str)):
        cls = _class_name(index.get(sub))
        if cls is None or not (sub.startswith("text_encoder") or sub == "vae"):
            continue
        shapes = _shapes(root / sub)
        if shapes is None:
            return None
        if sub == "vae":
            vae = (cls, shapes)
        else:
            encoders.append((cls, shapes))
    if vae is None or not encoders:
        return None
    layers, largest = 0, 0
    for _, shapes in encoders:
        sizes: dict[tuple[str, ...], int] = {}
        for name, shape in shapes.items():
            found = _LAYER.match(name)
            if found:
                sizes[found.groups()] = sizes.get(found.groups(), 0) + math.prod(shape)
        layers += len(sizes)
        largest = max(largest, *sizes.values(), 0)
    # the vocabulary embedding: each encoder's largest tensor (T5's ``shared``, CLIP's and Llama's token table)
    embeds = [max(math.prod(s) for s in shapes.values()) for _, shapes in encoders if shapes]
    return {"text_encoder": " + ".join(cls for cls, _ in encoders),
            "text_encoder_parameters": sum(math.prod(s) for _, shapes in encoders for s in shapes.values()),
            "text_encoder_layers": max(layers, 1), "text_encoder_embedding": max(embeds, default=0),
            "text_encoder_layer": largest,
            "vae": vae[0], "vae_parameters": sum(math.prod(s) for s in vae[1].values())}
