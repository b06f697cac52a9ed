"""The torch side of each family on the generic path: one module per family (the torch-free facts
are in ``sporch.orchestrator.models.families``), found by the same family name.

Each module has ``TINY`` (a tiny config of the family's diffusers class, for tests and tiny
folders), ``BATCHED`` (the forward arguments with one row per sample) and
``inputs(config, batch=, grid=, text_len=, generator=)``: the forward keyword
arguments of a random job (latents of the token grid [f, h, w], random text embeddings of the
config's text width, the family's other conditioning), whole on every rank.
"""

from __future__ import annotations

from types import ModuleType

from . import cogvideox, flux, hunyuanvideo, ltx, qwenimage, sd3, wan

_BY_NAME: dict[str, ModuleType] = {"wan": wan, "flux": flux, "qwen-image": qwenimage, "ltx-video": ltx, "sd3": sd3,
                                   "cogvideox": cogvideox,
                                   "hunyuanvideo": hunyuanvideo}


def family_module(name: str) -> ModuleType:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no generic-path runtime for family {name!r}; known: {', '.join(_BY_NAME)}") from None
