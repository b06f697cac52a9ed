"""Wan2.2 A14B's two experts inside the pipeline's own loop (``WanPipeline`` switches from
``transformer`` to ``transformer_2`` once the timestep falls below ``boundary_ratio`` x the
scheduler's training timesteps): which step each prompt switched at, and where the idle expert
waits (``plan.placement.experts``).

* ``resident``: both experts stay on the device;
* ``offload``: one expert at a time on the device, the idle one in host memory; when the pipeline
  calls the other expert, the two trade places (a forward pre-hook on each: the pipeline's code is
  unchanged). Each trade counts as a move (``moves``; one per prompt that switches, and one more when
  the next prompt starts with the high-noise expert again).

The switch step is read from the pipeline's own calls: the first step whose transformer call is
``transformer_2``'s (the denoiser tells :meth:`ExpertSwitch.step_done` after each step).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["ExpertSwitch"]


class ExpertSwitch:
    """The experts of ``pipe`` (none for a one-transformer pipeline: every method a no-op)."""

    def __init__(self, pipe: Any, placement: str, device: torch.device) -> None:
        first, second = getattr(pipe, "transformer", None), getattr(pipe, "transformer_2", None)
        self.experts = [e for e in (first, second) if e is not None]
        self.two = len(self.experts) == 2
        self.offload = self.two and placement == "offload"
        self.device, self.host = device, torch.device("cpu")
        self.boundary = (float(pipe.config.boundary_ratio) * float(pipe.scheduler.config.num_train_timesteps)
                         if self.two and getattr(pipe.config, "boundary_ratio", None) is not None else None)
        self.placement = placement
        self.switch_steps: list[int | None] = []
        self.moves = 0
        self.active = 0
        self.step = 0
        self._handles = []
        if self.two:
            if self.offload:
                self.experts[1].to(self.host)
            for index, expert in enumerate(self.experts):
                self._handles.append(expert.register_forward_pre_hook(self._calling(index)))

    def _calling(self, index: int):
        def hook(module, args):
            if index == 1 and self.switch_steps and self.switch_steps[-1] is None:
                self.switch_steps[-1] = self.step
            if self.offload and index != self.active:
                self.experts[self.active].to(self.host)
                self.experts[index].to(self.device)
                self.active, self.moves = index, self.moves + 1
            return None
        return hook

    def begin_prompt(self) -> None:
        """A new pipeline call: its switch step not seen yet, its steps counted from 0."""
        if self.two:
            self.switch_steps.append(None)
        self.step = 0

    def step_done(self) -> None:
        self.step += 1

    def record(self) -> dict[str, Any]:
        """result.json's ``experts``: the boundary, each prompt's switch step, the placement, the moves."""
        return {"count": 2, "boundary_timestep": self.boundary, "switch_steps": list(self.switch_steps),
                "placement": self.placement, "moves": self.moves}

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
