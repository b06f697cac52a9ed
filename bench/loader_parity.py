"""CPU, float32: original-release checkpoints and LoRA adapters through the field's loaders (the one
model path) beside sporch's hand-built loader and name tables, on tiny random models.

    python bench/loader_parity.py

Checkpoints: a Wan T2V and a Wan I2V in Wan-Video's ``WanModel`` names (with config.json) and a
Flux in Black Forest Labs' names (one file), each written from a random diffusers model (the test
helpers' independent name maps, tests/runtime/models/published.py). Each is loaded three ways: the
diffusers folder of the same weights (``load_diffusers``), the original file through diffusers'
single-file converter (runtime/models/original.py), and sporch's hand-built model with its
key maps (``build_model(weights=...)``, what main ran before the one path); printed: the max abs
difference of each pair's outputs on the same inputs.

Adapters: musubi-tuner's Wan (underscored original names, alphas), LightX2V's Wan (pairs, ``diff_b``,
a norm ``diff``, ``diff_m``; without the head's ``diff``, which main's loader fails on) and sd-scripts' Flux (fused qkv, final layer), written by
tests/runtime/models/test_generic_lora_formats.py's writers, merged at scale 0.7 by the one path
(``generic.lora.apply_lora``) and by the hand-built loader (``runtime/models/lora.merge_loras``) into
the same weights; printed: the max abs difference of the merged weights (the hand-built model's
parameters mapped into diffusers' names by its own name table) and of the outputs.

The hand-built half needs the hand-built stack (runtime/models/{wan,mmdit}.py, keymaps); it records
the comparison made before that stack is deleted (docs/model.md).
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.runtime.models.published import flux_reference, sporch_flux_dict, sporch_wan_dict  # noqa: E402
from tests.runtime.models.test_generic_lora_formats import (CONFIGS, LOADERS, SCALE, base_model,  # noqa: E402
                                                           kohya_flux, lightx2v_wan, musubi_wan)
from tests.runtime.models.test_original_checkpoints import write_cases  # noqa: E402

TEXT = 7
I2V_TEXT = 512  # diffusers' Wan I2V takes the last 512 context tokens as text
GUIDANCE = 3.5


def inputs(family, cfg, seed=1):
    """(diffusers call, hand-built call): the same latents, timestep and conditions for both."""
    g = torch.Generator().manual_seed(seed)
    if family == "flux":
        x = torch.randn(1, cfg["in_channels"] // 4, 1, 6, 6, generator=g)
        text = torch.randn(1, TEXT, cfg["joint_attention_dim"], generator=g)
        pooled = torch.randn(1, cfg["pooled_projection_dim"], generator=g)
        return (lambda m: flux_reference(m, x, 0.6, text, pooled, GUIDANCE),
                lambda h: h(x, torch.tensor([600.0]), {"text": text, "pooled": pooled}, guidance=GUIDANCE))
    t = torch.tensor([650.0])
    if cfg.get("image_dim"):
        half = cfg["in_channels"] // 2
        x, y = torch.randn(1, half, 3, 6, 6, generator=g), torch.randn(1, half, 3, 6, 6, generator=g)
        text = torch.randn(1, I2V_TEXT, cfg["text_dim"], generator=g)
        image = torch.randn(1, 5, cfg["image_dim"], generator=g)
        return (lambda m: m(torch.cat([x, y], 1), t, text, encoder_hidden_states_image=image, return_dict=False)[0],
                lambda h: h(x, t, {"text": text, "image": image, "latents": y}))
    x = torch.randn(1, cfg["in_channels"], 3, 6, 6, generator=g)
    text = torch.randn(1, TEXT, cfg["text_dim"], generator=g)
    return (lambda m: m(x, t, text, return_dict=False)[0], lambda h: h(x, t, text))


@torch.no_grad()
def outputs(family, cfg, model, hand):
    run, run_hand = inputs(family, cfg)
    return run(model), (run_hand(hand) if hand is not None else None)


def hand_built(family, cfg, weights):
    from sporch.runtime.models import build_model

    text = I2V_TEXT if cfg.get("image_dim") else TEXT
    md = sporch_wan_dict(cfg, text_len=text) if family == "wan" else sporch_flux_dict(cfg, text_len=TEXT)
    return build_model(md, weights=weights)


def hand_built_in_diffusers_names(model, family, reference):
    """The hand-built model's parameters as diffusers' (its name table run backwards: each sporch
    parameter's diffusers sources and transform, applied to ``reference``'s, compared by the caller)."""
    from sporch.orchestrator.models import flux, wan
    from sporch.runtime.models.keymaps.transforms import TRANSFORMS

    table = wan.TABLE if family == "wan" else flux.TABLE
    theirs = reference.state_dict()
    ours = model.state_dict()
    worst = 0.0
    for name, (srcs, transform, leaf) in table.sources(list(ours), "diffusers").items():
        want = TRANSFORMS[transform]([theirs[s] for s in srcs], model.cfg, leaf)
        worst = max(worst, float((ours[name] - want.reshape(ours[name].shape)).abs().max()))
    return worst


def checkpoints(root):
    from sporch.orchestrator.models.checkpoint_files import CheckpointError
    from sporch.runtime.models.build import load_diffusers

    cases = write_cases(root)
    print(f"{'checkpoint':<12} {'original vs diffusers folder':>29} {'original vs hand-built':>23} {'|output|':>9}")
    for name, case in cases.items():
        family = name.split("-")[0]
        cfg = case["config"]
        folder = load_diffusers(case["diffusers"])
        original = load_diffusers(case["original"], config=cfg if family == "flux" else None)
        note = ""
        try:
            hand = hand_built(family, cfg, case["original"])
        except CheckpointError:  # the key maps do not read ComfyUI's model.diffusion_model. prefix
            hand, note = hand_built(family, cfg, case["diffusers"]), " (hand-built from the diffusers folder: it " \
                "does not read the model.diffusion_model. prefix)"
        a, h = outputs(family, cfg, original, hand)
        b, _ = outputs(family, cfg, folder, None)
        print(f"{name:<12} {float((a - b).abs().max()):>29.3g} {float((a - h).abs().max()):>23.3g} "
              f"{float(a.abs().max()):>9.3g}{note}")


def without_head_diff(path, want, model):
    from safetensors.torch import load_file, save_file

    tensors = {k: v for k, v in load_file(path).items() if k != "diffusion_model.head.head.diff"}
    save_file(tensors, path)
    return path, {**want, "proj_out.weight": model.state_dict()["proj_out.weight"].clone()}


def adapters(root):
    from sporch.runtime.models.lora import apply_lora
    from sporch.runtime.models.lora import merge_loras

    print()
    print(f"{'adapter':<13} {'merged weights vs hand-built':>29} {'outputs vs hand-built':>22} {'vs arithmetic':>14} "
          f"{'|output|':>9}")
    for name, write in (("wan-musubi", musubi_wan), ("wan-lightx2v", lightx2v_wan), ("flux-kohya", kohya_flux)):
        family = name.split("-")[0]
        cfg = CONFIGS[family]
        model = base_model(family)
        folder = root / f"{name}-base"
        model.save_pretrained(str(folder))
        path, want = write(model, root / f"{name}.safetensors")
        if name == "wan-lightx2v":  # main's loader fails on a difference outside a block (head.head.diff:
            path, want = without_head_diff(path, want, model)  # IndexError in lora_targets.map_deltas)
        lora = [{"path": path, "scale": SCALE}]
        apply_lora(model, lora, LOADERS[family])
        arithmetic = max(float((model.state_dict()[k] - v).abs().max()) for k, v in want.items())
        hand = hand_built(family, cfg, str(folder))
        merge_loras(hand, lora)
        weights = hand_built_in_diffusers_names(hand, family, model)
        out, h = outputs(family, cfg, model, hand)
        print(f"{name:<13} {weights:>29.3g} {float((out - h).abs().max()):>22.3g} {arithmetic:>14.3g} "
              f"{float(out.abs().max()):>9.3g}")


def main() -> int:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        from pathlib import Path

        checkpoints(Path(tmp) / "ckpt")
        adapters(Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
