"""A diffusers pipeline folder's two experts (Wan2.2 A14B) and its per-token timesteps (Wan2.2
TI2V-5B), read from its ``model_index.json`` (standard library only: the planner and the runtime
read it the same way).

Wan2.2 A14B's folder lists ``transformer`` (high noise) and ``transformer_2`` (low noise) and
sets the pipeline's ``boundary_ratio``: diffusers' ``WanPipeline`` runs ``transformer`` while the
timestep ``t >= boundary_ratio x num_train_timesteps`` and ``transformer_2`` after. sporch runs
both experts with one plan.model shape, so their configs must describe the same architecture.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from sporch.orchestrator.models.checkpoint_files import CheckpointError, kind
from sporch.orchestrator.models.checkpoint_config import model_from_config, read_json_object

#: The low-noise expert's subfolder in a diffusers pipeline folder.
SECOND = "transformer_2"


@dataclass(frozen=True)
class Experts:
    boundary_ratio: float
    folder: Path  # the pipeline folder
    second: Path  # its transformer_2/ (weights and config.json)


def _listed(entry: Any) -> bool:
    """A model_index.json component entry that names a class (``[null, null]``: absent)."""
    return isinstance(entry, (list, tuple)) and any(e is not None for e in entry)


def check_boundary(value: Any, where: str) -> float:
    """``value`` as a boundary ratio strictly between 0 and 1, or a one-line CheckpointError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < float(value) < 1:
        raise CheckpointError(f"{where}: boundary_ratio {value!r} must be a number strictly between 0 and 1 "
                              "(the fraction of the 1000 training timesteps above which transformer runs)")
    return float(value)


def read_experts(weights: str | Path) -> Optional[Experts]:
    """The two experts of the pipeline folder ``weights`` (None: no model_index.json, or one
    transformer). A folder diffusers would run differently from sporch is refused in one line."""
    folder = Path(weights).expanduser()
    index = folder / "model_index.json"
    if kind(folder) != "dir" or kind(index) is None:
        return None
    config = read_json_object(index)
    boundary, two = config.get("boundary_ratio"), _listed(config.get(SECOND))
    if boundary is None and not two:
        return None
    if boundary is None:
        raise CheckpointError(f"{index} lists {SECOND} but sets no boundary_ratio, so it would never run; set "
                              "boundary_ratio (Wan2.2 T2V A14B: 0.875) or remove the transformer_2 entry")
    ratio = check_boundary(boundary, str(index))
    if not two:
        raise CheckpointError(f"{index} sets boundary_ratio {boundary} but lists no {SECOND} (the low-noise "
                              "expert); add it or set boundary_ratio to null")
    second = folder / SECOND
    check_same_model(folder / "transformer" / "config.json", second / "config.json")
    return Experts(boundary_ratio=ratio, folder=folder, second=second)


def read_expand_timesteps(weights: str | Path) -> Optional[bool]:
    """The pipeline folder's ``expand_timesteps`` (Wan2.2 TI2V-5B: one timestep per token, the
    given first frame's tokens at 0), or None when ``weights`` has no model_index.json."""
    index = Path(weights).expanduser() / "model_index.json"
    if kind(index) is None:
        return None
    value = read_json_object(index).get("expand_timesteps", False)
    if not isinstance(value, bool):
        raise CheckpointError(f"{index}: expand_timesteps {value!r} must be true or false")
    return value


def _read(path: Path):
    if kind(path) is None:
        raise CheckpointError(f"{path} is missing: both experts need their config.json (diffusers layout)")
    return model_from_config(read_json_object(path), path)


def check_same_model(first: Path, second: Path) -> None:
    """Both experts' configs describe one architecture (sporch runs both with one plan.model)."""
    a, b = _read(first), _read(second)
    mine, theirs = ({k: v for k, v in (m.config or {}).items() if not k.startswith("_")} for m in (a, b))
    differ = [f"{k} {theirs.get(k)!r} (transformer: {mine.get(k)!r})" for k in sorted(set(mine) | set(theirs))
              if mine.get(k) != theirs.get(k)]
    if differ:
        raise CheckpointError(f"{second}: the low-noise expert's architecture differs from transformer's in "
                              f"{len(differ)} config key(s): {'; '.join(differ)}; sporch runs two experts of one "
                              "shape")
