"""Entrypoints for the launch tests (``entrypoint: "launch_hooks:NAME"``; the tests put this
folder on the ranks' PYTHONPATH)."""

import os


def report_layout(ctx, plan):
    """Return what this rank sees: its coordinates and the sizes of its groups."""
    import torch.distributed as dist

    rank = dist.get_rank()
    return {
        "rank": rank,
        "coords": {dim: ctx.coord(dim) for dim in ("dp", "cfg", "ring", "ulysses")},
        "ulysses_group": ctx.group_ranks("ulysses"),
        "ring_group": ctx.group_ranks("ring"),
        "job_name": plan.job.name,
    }


def fail_on_rank(ctx, plan):
    """Raise on the rank named by SPORCH_TEST_FAIL_RANK; the others wait in a collective."""
    import torch
    import torch.distributed as dist

    if dist.get_rank() == int(os.environ["SPORCH_TEST_FAIL_RANK"]):
        raise ValueError("injected failure for the test")
    dist.all_reduce(torch.ones(1))
    return {}


def slow_rank(ctx, plan):
    """The rank named by SPORCH_TEST_SLOW_RANK finishes SPORCH_TEST_SLOW_S seconds after the
    others (a loaded machine): its record comes late to rank 0."""
    import time

    import torch.distributed as dist

    if dist.get_rank() == int(os.environ["SPORCH_TEST_SLOW_RANK"]):
        time.sleep(float(os.environ["SPORCH_TEST_SLOW_S"]))
    return {}


def hang_rank(ctx, plan):
    """The rank named by SPORCH_TEST_HANG_RANK sleeps for an hour; the others return at once."""
    import time

    import torch.distributed as dist

    if dist.get_rank() == int(os.environ["SPORCH_TEST_HANG_RANK"]):
        time.sleep(3600)
    return {}


def fail_named(ctx, plan):
    """Every rank raises when SPORCH_TEST_FAIL_POINT is part of the job's name (one point of a
    campaign fails, the others return)."""
    name = os.environ.get("SPORCH_TEST_FAIL_POINT")
    if name and name in plan.job.name:
        raise ValueError(f"injected failure of point {name}")
    return {"ran": plan.job.name}
