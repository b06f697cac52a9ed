"""Denoised latents kept on disk, so that no finished denoising is ever done twice.

At a prompt's last step the replica's leader writes its latents (as the pipeline holds them before
its decode tail: Wan's [C, F, H, W], Flux's packed tokens) to ``<job dir>/latents/<index>.safetensors``
(written to a temporary name, then renamed: a file there is whole) before the pipeline decodes
them. A later run of the same job (a requeue, a re-run after the VAE ran out of memory,
``sporch decode RUN_DIR``) finds them and decodes without denoising (the family's
``decode_latents``: the pipeline's decode tail).

Each file carries a fingerprint of everything that decides the latents (the model, its
weights' folder and LoRA adapters, the prompt and negative prompt, the seed, steps, guidance
(both experts'), the first-frame image's content, shape, dtype, scheduler and shift): a file whose fingerprint differs (the job file changed) is not used and
is overwritten. A second hash, ``subject``, leaves out what the speed levers change (steps,
scheduler, guidance, low-bit weights, LoRA, cache, attention precision): a campaign compares
outputs of one subject. The step cache (``workload.cache``) is kept beside it (metadata ``step_cache``):
a denoising run uses only latents of the same cache, while the fingerprint stays that of the
workload, so a campaign compares cached outputs with the uncached reference.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch

from sporch.orchestrator.safe_files import NotAFileError, read_regular, write_atomic

from sporch.runtime.pipelines.params import GenerateParams

FOLDER = "latents"


class SavedLatentsError(ValueError):
    """Saved latents whose fingerprint matches the job but whose tensor does not (its shape,
    dtype or values changed): one line naming the file; nothing is decoded from them."""


def latents_problem(latents: torch.Tensor, shape: list[int] | None) -> str | None:
    """Why ``latents`` (one prompt's, as read from its file) are not what the job wrote (``shape``:
    the shape its metadata records), or None."""
    if shape is not None and list(latents.shape) != list(shape):
        return f"holds latents of shape {list(latents.shape)}, but the job wrote {list(shape)}"
    if latents.dtype != torch.float32:
        return f"holds {str(latents.dtype).removeprefix('torch.')} latents, but they are saved as float32"
    bad = int((~torch.isfinite(latents)).sum())
    if bad:
        return f"holds {bad} NaN or inf value(s) of {latents.numel()}"
    return None


def fingerprint(params: GenerateParams, index: int) -> str:
    """What decides prompt ``index``'s latents, hashed."""
    keys = {"model": params.model, "root": str(params.root), "prompt": params.prompts[index],
            "negative_prompt": params.negative_prompt, "seed": params.seed + index, "steps": params.steps,
            "guidance_scale": params.guidance_scale, "frames": params.frames, "height": params.height,
            "width": params.width, "dtype": params.dtype, "scheduler": params.scheduler, "shift": params.shift,
            "guidance_scale_2": params.guidance_scale_2, "image": _file_id(params.image)}
    if params.sigmas is not None:
        keys["sigmas"] = list(params.sigmas)
    if params.attention_precision != "exact":  # a lossy kernel's latents are not an exact run's
        keys["attention_precision"] = params.attention_precision
    text = json.dumps(keys, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


#: What the speed levers change (docs/campaigns.md, "Quality beside speed"): the subject of two
#: outputs that differ only in these is the same, so a campaign compares them.
LEVER_MODEL_KEYS = ("quant", "lora")


def subject(params: GenerateParams, index: int) -> str:
    """What prompt ``index``'s output is a picture of, hashed: the model (less its low-bit
    weights and LoRA adapters), weights, prompt, seed, shape and dtype; not the steps, shift,
    scheduler, guidance, step cache or attention precision a recipe or a lever changes."""
    model = {k: v for k, v in params.model.items() if k not in LEVER_MODEL_KEYS}
    keys = {"model": model, "root": str(params.root), "prompt": params.prompts[index], "seed": params.seed + index,
            "frames": params.frames, "height": params.height, "width": params.width, "dtype": params.dtype,
            "image": _file_id(params.image)}
    return hashlib.sha256(json.dumps(keys, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def _file_id(path: str | None) -> str | None:
    """A conditioning file (the I2V first frame) by its content: a replaced image changes it."""
    if not path:
        return None
    try:
        return hashlib.sha256(read_regular(path)).hexdigest()  # a FIFO is refused, never waited on
    except (OSError, NotAFileError):
        return path


def cache_label(cache: Any) -> str:
    """A Plan's ``workload.cache`` section as text: ``none`` or its keys as JSON."""
    if cache is None or getattr(cache, "method", "none") == "none":
        return "none"
    return json.dumps(cache.to_dict(), sort_keys=True)


class LatentStore:
    """The job's saved latents (``output_dir/latents``)."""

    def __init__(self, params: GenerateParams, output_dir: str | os.PathLike, step_cache: str | None = None) -> None:
        """``step_cache``: the job's cache as text (:func:`cache_label`): saved latents of
        another cache are not used; None: any (decoding saved latents)."""
        self.params = params
        self.folder = Path(output_dir) / FOLDER
        self.step_cache = step_cache

    def path(self, index: int) -> Path:
        return self.folder / f"{index:05d}.safetensors"

    def has(self, index: int) -> bool:
        """Whether prompt ``index``'s latents are saved for this very job (fingerprint)."""
        return self._read(index, tensors=False) is not None

    def load(self, indices: list[int]) -> torch.Tensor:
        """[B, ...] float32 latents of ``indices`` (all must be saved), each checked against the
        shape the job wrote, float32 and finite (SavedLatentsError otherwise)."""
        parts = []
        for i in indices:
            got = self._read(i, tensors=True)
            if got is None:
                raise FileNotFoundError(f"no saved latents for prompt {i} in {self.folder}")
            parts.append(got)
        return torch.stack(parts)

    def save(self, indices: list[int], latents: torch.Tensor) -> None:
        """Prompt ``indices[k]``'s latents are ``latents[k]``; each file appears whole or not at
        all, never through a link (safe_files.write_atomic)."""
        from safetensors.torch import save

        for k, i in enumerate(indices):
            one = latents[k].detach().to("cpu", torch.float32).contiguous()
            data = save({"latents": one},
                        metadata={"fingerprint": fingerprint(self.params, i), "subject": subject(self.params, i),
                                  "index": str(i), "shape": json.dumps(list(one.shape)),
                                  "step_cache": self.step_cache or "none",
                                  "prompt": self.params.prompts[i][:200]})
            write_atomic(self.path(i), data)

    def saved(self) -> list[int]:
        """Indices of every prompt whose latents are saved for this job."""
        return [i for i in range(len(self.params.prompts)) if self.has(i)]

    def _read(self, index: int, *, tensors: bool) -> Any:
        from safetensors import safe_open

        path = self.path(index)
        if not path.is_file():
            return None
        try:
            with safe_open(str(path), framework="pt", device="cpu") as fh:
                meta = fh.metadata() or {}
                if meta.get("fingerprint") != fingerprint(self.params, index):
                    return None
                if self.step_cache is not None and meta.get("step_cache", "none") != self.step_cache:
                    return None
                if not tensors:
                    return True
                latents = fh.get_tensor("latents")
                shape = json.loads(meta["shape"]) if meta.get("shape") else None
        except Exception:  # noqa: BLE001 - a broken file is no saved latents: denoise again
            return None
        problem = latents_problem(latents, shape)
        if problem:
            raise SavedLatentsError(f"{path} {problem}; the file was changed after the job wrote it: delete it "
                                    "and run the job again to denoise that prompt")
        return latents
