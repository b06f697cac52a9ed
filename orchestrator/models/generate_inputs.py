"""Checks a generate job can pass before any rank starts; standard library only, so the
orchestrator (``sporch run --local``) may call them without importing torch.

Every problem is one line naming what is wrong and how to fix it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from sporch.orchestrator.models.families import FAMILIES, Family, get_family
from sporch.orchestrator.safe_files import NotAFileError, read_regular

#: The modules the generate workload imports; all come with ``pip install sporch[pipelines]``.
PIPELINE_MODULES = ("diffusers", "transformers", "imageio", "imageio_ffmpeg")
EXTRA_HINT = "pip install sporch[pipelines]"


class PipelinesMissing(ImportError):
    """The pipelines extra is not installed; the message is one line naming it."""


def missing_modules() -> list[str]:
    return [m for m in PIPELINE_MODULES if importlib.util.find_spec(m) is None]


def require_pipelines() -> None:
    """Raise :class:`PipelinesMissing` (one line) when a module of the extra is not importable."""
    missing = missing_modules()
    if missing:
        raise PipelinesMissing(f"workload.kind=generate needs the pipelines extra ({', '.join(missing)} "
                               f"not installed): {EXTRA_HINT}")


def pipeline_problems(root: str | Path, family: str, image_folders: tuple[str, ...] = ()) -> list[str]:
    """What is missing from a diffusers-layout folder for ``family`` (its ``pipeline_folders``, and
    ``image_folders``: what the model reads an image with, :func:`image_folders`; empty when usable)."""
    p = Path(root).expanduser()
    folders = get_family(family).pipeline_folders + tuple(image_folders)
    if not p.is_dir():
        return [f"model.weights {p} is not a folder; generate needs a diffusers pipeline folder "
                f"({', '.join(folders)}/ and model_index.json)"]
    missing = [f"{name}/" for name in folders if not (p / name).is_dir()]
    if not (p / "model_index.json").is_file():
        missing.append("model_index.json")
    if missing:
        return [f"model.weights {p} lacks {', '.join(missing)}: generate needs the publisher's diffusers "
                f"layout (e.g. Wan2.1-T2V-1.3B-Diffusers, Wan2.1-I2V-14B-480P-Diffusers, FLUX.1-dev)"]
    return []


def read_prompts(path: str | Path) -> list[str]:
    """One prompt per line; blank lines and lines starting with '#' are skipped."""
    p = Path(path).expanduser()
    try:
        lines = read_regular(p).decode("utf-8").splitlines()  # never a FIFO: it would block
    except NotAFileError as exc:
        raise ValueError(f"workload.prompt_file {exc}") from None
    except OSError as exc:
        raise ValueError(f"workload.prompt_file {p}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"workload.prompt_file {p}: not UTF-8 text") from None
    prompts = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if not prompts:
        raise ValueError(f"workload.prompt_file {p} holds no prompt (one per line)")
    return prompts


def _config(model: Any) -> dict:
    return dict(getattr(model, "diffusers_config", None) or {})


def image_input(model: Any) -> str:
    """Whether a generate job of ``model`` (``plan.model``) gives ``workload.image``: "required",
    "optional" or "none" (its family's ``image_input`` of its config)."""
    fam = get_family(model.family) if getattr(model, "family", None) else None
    return fam.image_input(_config(model), bool(getattr(model, "expand_timesteps", False))) if fam else "none"


def image_to_video(model: Any) -> bool:
    """The model needs ``workload.image`` (image-to-video: Wan I2V)."""
    return image_input(model) == "required"


def takes_image(model: Any) -> bool:
    """A generate job of ``model`` may take ``workload.image``: image-to-video (it needs one) or
    text-image-to-video (Wan2.2 TI2V-5B: optional)."""
    return image_input(model) != "none"


def image_folders(model: Any) -> tuple[str, ...]:
    """The pipeline folder's sub-folders the model reads an image with besides the pipeline's own
    (Wan2.1 I2V's CLIP image encoder and processor)."""
    fam = get_family(model.family) if getattr(model, "family", None) else None
    return fam.image_folders(_config(model)) if fam else ()


def generate_family(model: Any) -> Family:
    """The family recorded in ``plan.model.family`` when it has a generate pipeline (its module's
    ``pipeline_folders``), else ValueError (one line, listing the families that generate from the
    registry, so a new family is named without an edit here)."""
    fam = get_family(model.family) if model.family else None
    if fam is None or not fam.pipeline_class:
        video = ", ".join(f.title for f in FAMILIES if f.pipeline_class and f.video)
        image = ", ".join(f.title for f in FAMILIES if f.pipeline_class and not f.video)
        raise ValueError(f"workload.kind=generate needs a model of a family with a generate pipeline: video "
                         f"({video}) or image ({image}), got {model.diffusers_class} (family {model.family})")
    return fam


def check_generate(model: Any, workload: Any) -> list[str]:
    """Problems of a generate job on this machine: the extra, the model family, the pipeline
    folder (unless the job creates tiny random weights) and the prompt file."""
    problems: list[str] = []
    try:
        require_pipelines()
    except PipelinesMissing as exc:
        problems.append(str(exc))
    try:
        family = generate_family(model).name
    except ValueError as exc:
        return problems + [str(exc)]
    weights = model.weights
    if not weights:
        problems.append("workload.kind=generate needs model.weights: a diffusers pipeline folder "
                        "(or workload.tiny_weights: true with a folder to create)")
    elif not (workload.tiny_weights and not Path(weights).expanduser().exists()):
        problems += pipeline_problems(weights, family, image_folders(model))
    if workload.prompt_file:
        try:
            read_prompts(workload.prompt_file)
        except ValueError as exc:
            problems.append(str(exc))
    image = getattr(workload, "image", None)
    if image_to_video(model) and not image:
        problems.append(f"model {model.preset or model.weights} is image-to-video: set workload.image (the first frame)")
    elif image and not takes_image(model):
        problems.append(f"workload.image is the first frame of an image-to-video model, but model "
                        f"{model.preset or model.weights} is text-to-video; remove it")
    elif image and not Path(image).expanduser().is_file():
        problems.append(f"workload.image {image} is not a file")
    return problems
