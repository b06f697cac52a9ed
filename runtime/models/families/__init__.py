"""The torch side of each family on the one model path: one module per family (the torch-free facts
are in ``sporch.orchestrator.models.families``), found by the same family name.

Each module has ``TINY`` (a tiny config of the family's diffusers class, for tests and tiny
folders), ``BATCHED`` (the forward arguments with one row per sample) and
``inputs(config, batch=, grid=, text_len=, generator=)``: the forward keyword
arguments of a random job (latents of the token grid [f, h, w], random text embeddings of the
config's text width, the family's other conditioning), whole on every rank.

A family whose diffusers pipeline generate runs (``Family.pipeline_class``) also has
what runtime/pipelines/generate_run.py calls around it:

* ``encode(pipe, prompt, negative=, cfg=, text_len=, device=)``: the pipeline's own
  ``encode_prompt`` as its call would run it, returned as the call's embedding keyword arguments;
* ``call_arguments(guidance_scale=, cfg=, text_len=)``: the call's guidance (and text length)
  arguments for the job's scale, CFG on or off;
* ``tiny_pipeline(seed)``: a tiny random pipeline of the family's real component classes (tests,
  runtime/pipelines/tiny.py).
"""

from __future__ import annotations

from types import ModuleType

from . import (chroma, chronoedit, cogvideox, cogview4, cosmos, flux, flux2, helios, hidream, hunyuanvideo, ltx, ltx2,
               lumina2, minimax_h3, pixart, qwenimage, sd3, skyreels_v2, wan, wan_vace, z_image)

_BY_NAME: dict[str, ModuleType] = {"wan": wan, "flux": flux, "qwen-image": qwenimage, "ltx-video": ltx, "sd3": sd3,
                                   "cogvideox": cogvideox,
                                   "hunyuanvideo": hunyuanvideo, "pixart": pixart, "flux2": flux2, "ltx2": ltx2,
                                   "chronoedit": chronoedit, "helios": helios, "minimax-h3": minimax_h3,
                                   "cogview4": cogview4, "lumina2": lumina2, "chroma": chroma,
                                   "skyreels-v2": skyreels_v2, "z-image": z_image, "hidream": hidream, "cosmos": cosmos,
                                   "wan-vace": wan_vace}


def family_module(name: str) -> ModuleType:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no runtime for family {name!r}; known: {', '.join(_BY_NAME)}") from None


def generate_families() -> tuple[str, ...]:
    """The families whose module carries generate's pipeline calls (``encode``)."""
    return tuple(name for name, module in _BY_NAME.items() if hasattr(module, "encode"))
