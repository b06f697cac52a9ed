"""CPU, float32: original-release checkpoints and LoRA adapters through diffusers' loaders (sporch's
one model path) beside what they must equal, on tiny random models.

    python bench/loader_parity.py

Checkpoints: a Wan T2V in Wan-Video's ``WanModel`` names (2 shards, config.json), a Wan I2V in
ComfyUI's ``model.diffusion_model.`` repackaging and a Flux in Black Forest Labs' names (one file),
each written from a random diffusers model (tests/runtime/models/test_original_checkpoints.py's
``write_cases``, on the test helpers' independent name maps, tests/runtime/models/published.py).
Each original file is loaded through diffusers' single-file converter
(runtime/models/original.py, ``generic.build.load_diffusers``) beside the diffusers folder of
the same weights; printed: how many parameters differ, the max abs difference of the outputs on the
same inputs and the largest output.

Adapters: every format tests/runtime/models/test_generic_lora_formats.py writes (musubi-tuner's Wan,
LightX2V's Wan with ``diff_b``, a norm ``diff``, ``diff_m`` and the head's ``diff``, PEFT in Wan's
names, sd-scripts' Flux with fused qkv and the final layer, PEFT in BFL's names, ai-toolkit's Flux),
merged at scale 0.7 by the one path (``generic.lora.apply_lora``); printed: the max abs difference
of the merged weights from the arithmetic ``W + scale x alpha / rank x up @ down`` (``P + scale x
diff`` for whole-tensor differences, computed by the writers), the max abs difference of the merged
model's outputs from those of the same class holding the arithmetic's weights, and the largest output.

Until the hand-built stack was deleted this bench also compared both against sporch's hand-built
loader and name tables (``build_model(weights=...)``, ``lora.merge_loras``); that comparison was
retired with the hand-built stack, its last figures stay in docs/model.md.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.runtime.models.test_generic_lora_formats import LOADERS, SCALE, WRITERS, base_model  # noqa: E402
from tests.runtime.models.test_original_checkpoints import write_cases  # noqa: E402


def family_inputs(family: str, config: dict, seed: int = 3) -> dict:
    """The family's random forward inputs (the tests' shapes), CLIP image tokens for a Wan I2V."""
    from sporch.runtime.models.families import family_module

    g = torch.Generator().manual_seed(seed)
    kw = family_module(family).inputs(config, batch=1, grid=(2, 2, 3) if family == "wan" else (1, 2, 3), text_len=5,
                                      generator=g)
    if config.get("image_dim"):
        kw["encoder_hidden_states_image"] = torch.randn(1, 4, config["image_dim"], generator=g)
    return kw


@torch.no_grad()
def forward(model: torch.nn.Module, kw: dict) -> torch.Tensor:
    return model(**kw)[0]


def checkpoints(root: Path) -> None:
    from sporch.runtime.models.build import load_diffusers

    cases = write_cases(root)
    print(f"{'checkpoint':<12} {'params unequal':>14} {'original vs diffusers folder':>29} {'|output|':>9}")
    for name, case in cases.items():
        family = name.split("-")[0]
        cfg = case["config"]
        folder = load_diffusers(case["diffusers"])
        original = load_diffusers(case["original"], config=cfg if family == "flux" else None)  # Flux: no config.json
        mine, theirs = original.state_dict(), folder.state_dict()
        unequal = sum(1 for k in theirs if k not in mine or not torch.equal(mine[k], theirs[k]))
        kw = family_inputs(family, cfg)
        a, b = forward(original, kw), forward(folder, kw)
        print(f"{name:<12} {f'{unequal}/{len(theirs)}':>14} {float((a - b).abs().max()):>29.3g} "
              f"{float(a.abs().max()):>9.3g}")


def adapters(root: Path) -> None:
    from sporch.runtime.models.lora import apply_lora

    print()
    print(f"{'adapter':<18} {'merged weights vs arithmetic':>29} {'outputs vs arithmetic':>22} {'|output|':>9}")
    for name, write in WRITERS.items():
        family = name.split("-")[0]
        model = base_model(family)
        path, want = write(model, root / f"{name}.safetensors")
        apply_lora(model, [{"path": path, "scale": SCALE}], LOADERS[family])
        got = model.state_dict()
        weights = max(float((got[k].float() - v).abs().max()) for k, v in want.items())
        arithmetic = base_model(family)
        arithmetic.load_state_dict(want)
        kw = family_inputs(family, dict(model.config))
        out, ref = forward(model, kw), forward(arithmetic, kw)
        print(f"{name:<18} {weights:>29.3g} {float((out - ref).abs().max()):>22.3g} {float(out.abs().max()):>9.3g}")


def main() -> int:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoints(Path(tmp) / "ckpt")
        adapters(Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
