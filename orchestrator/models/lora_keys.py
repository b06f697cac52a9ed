"""The key formats of LoRA adapter files (stdlib only): which prefix a module name carries, which
suffix says a tensor's format and role, and a key split into those.

* ``peft``: diffusers/PEFT, ``<prefix><module>.lora_A.weight`` / ``.lora_B.weight`` (prefix
  ``transformer.``, ``diffusion_model.`` or none), optional ``<module>.alpha``; an alpha of the
  whole file may sit in the header metadata ``lora_adapter_metadata`` (lora_alpha.py);
* ``kohya``: ``lora_unet_<module, dots as underscores>.lora_down.weight`` / ``.lora_up.weight`` /
  ``.alpha`` (sd-scripts, musubi-tuner, ai-toolkit's ``lora_transformer_`` prefix), or the same
  suffixes on dotted names;
* whole-tensor differences beside the pairs: ``.diff`` / ``.diff_b`` / ``.diff_m``.

Read by lora_file.py (:func:`~.lora_file.read_lora`) and lora_report.py.
"""

from __future__ import annotations

from typing import Optional


#: Prefixes a module name may carry (stripped); the kohya ones mark underscored names.
DOTTED_PREFIXES = ("base_model.model.", "transformer.", "diffusion_model.", "model.diffusion_model.")
KOHYA_PREFIXES = ("lora_unet_", "lora_transformer_")
#: Prefixes of adapters on the text encoders, which sporch does not adapt.
TEXT_PREFIXES = ("lora_te_", "lora_te1_", "lora_te2_", "text_encoder.", "text_encoder_2.")

SUFFIXES = {".lora_A.weight": ("peft", "down"), ".lora_B.weight": ("peft", "up"),
            ".lora_down.weight": ("kohya", "down"), ".lora_up.weight": ("kohya", "up"),
            ".alpha": (None, "alpha"),
            # whole-tensor differences beside the LoRA pairs (LightX2V's step-distill adapters, as
            # published with the original Wan2.1 names): a module's weight, its bias, and a
            # block's modulation table
            ".diff_b": (None, "diff_b"), ".diff_m": (None, "diff_m"), ".diff": (None, "diff")}
#: The parameter of the module (or block) a difference key changes.
DELTA_LEAVES = {"diff": "weight", "diff_b": "bias", "diff_m": "modulation"}


def _split(key: str) -> tuple[str, Optional[str], str]:
    for suffix, (fmt, role) in SUFFIXES.items():
        if key.endswith(suffix):
            return key[: -len(suffix)], fmt, role
    raise KeyError(key)


def _strip(name: str) -> tuple[str, bool]:
    for p in KOHYA_PREFIXES:
        if name.startswith(p):
            return name[len(p):], True
    for p in DOTTED_PREFIXES:
        if name.startswith(p):
            return name[len(p):], False
    return name, False
