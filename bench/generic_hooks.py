"""CPU: the host work sporch's sequence-parallel hooks add to a diffusers forward, and the graphs
a compiled forward takes with them (the generic path, runtime/models/sequence_parallel.py).

    python bench/generic_hooks.py [--families pixart ltx-video sd3] [--repeat 20] [--calls 12]

Each family's tiny random-weight model (the tests' ``TINY`` config, float32, one thread) runs one
forward over and over, four ways:

- ``plain``: the model as diffusers ships it;
- ``hooked``: inside ``with SequenceParallel(...)`` (entered anew for each forward, as the runner
  does) over a world of one rank (what sharding adds on the host: the hooks, the scoped
  ``TorchFunctionMode``, the routed attention);
- ``plain compiled`` / ``hooked compiled``: the same after ``compile_blocks`` (Dynamo with the
  ``eager`` backend: its guards, graph breaks and recompiles, no code generation).

Prints the median process CPU time per forward (ms; one thread, so other work on a shared machine
does not inflate it much) and the Python function calls per forward (cProfile's count: the same on
every run, where sub-millisecond times on a loaded machine are not), the graphs Dynamo built over
``--calls`` forwards and how many of them after the first forward (``late``: recompiles; Dynamo
stops at its recompile limit, 8 per function, and runs the rest eager), and the max abs difference between the
hooked and plain outputs. Tiny models: the numbers are host overhead, not GPU time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gpu_common import world_of_one  # noqa: E402
from sporch.orchestrator.models.families import FAMILIES, get_family  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", nargs="+", choices=sorted(f.name for f in FAMILIES), default=["pixart", "ltx-video", "sd3"])
    p.add_argument("--repeat", type=int, default=20, help="timed forwards per way (after 3 warm-up)")
    p.add_argument("--calls", type=int, default=12, help="compiled forwards over which graphs are counted")
    return p.parse_args(argv)


def python_calls(step, forwards: int = 5) -> int:
    """Python function calls per forward (cProfile's count: the same on every run, unlike time)."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(forwards):
        step()
    prof.disable()
    return pstats.Stats(prof).total_calls // forwards


def cpu_ms(step, repeat: int) -> float:
    for _ in range(3):
        step()
    times = []
    for _ in range(repeat):
        t = time.process_time()
        step()
        times.append((time.process_time() - t) * 1e3)
    return statistics.median(times)


def run_family(family: str, args, ctx) -> dict:
    import torch
    import torch._dynamo

    from sporch.runtime.compile import compile_blocks
    from sporch.runtime.models.build import random_diffusers
    from sporch.runtime.models.families import family_module
    from sporch.runtime.models.split_plans import split_plan
    from sporch.runtime.models.sequence_parallel import SequenceParallel

    fam = get_family(family)
    cls = fam.classes[0]
    mod = family_module(family)
    config = dict(mod.TINY)
    inputs = mod.inputs(config, batch=1, grid=(2, 4, 4), text_len=8, generator=torch.Generator().manual_seed(5))
    ours = random_diffusers(cls, config, seed=3)  # hooked (the hooks stay on it): its twin runs plain
    theirs = random_diffusers(cls, config, seed=3)
    hooks = SequenceParallel(ours, ctx, split_plan(type(ours)), local_attention=fam.local_attention)

    def plain():
        return theirs(**inputs)[0]

    def hooked():
        with hooks:
            return ours(**inputs)[0]

    row = {"family": family}
    graphs: list = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    with torch.no_grad():
        ref = plain()
        row["diff"] = float((hooked() - ref).abs().max())
        row["plain"] = cpu_ms(plain, args.repeat)
        row["hooked"] = cpu_ms(hooked, args.repeat)
        row["plain calls"], row["hooked calls"] = python_calls(plain), python_calls(hooked)
        for name, model, step in (("plain compiled", theirs, plain), ("hooked compiled", ours, hooked)):
            torch._dynamo.reset()
            graphs.clear()
            compile_blocks(model, backend=backend)
            step()
            first = len(graphs)
            for _ in range(args.calls - 1):
                step()
            row[f"{name} graphs"] = len(graphs)
            row[f"{name} late"] = len(graphs) - first
            row[name] = cpu_ms(step, args.repeat)
            row[f"{name} calls"] = python_calls(step)
        row["diff compiled"] = float((hooked() - ref).abs().max())
        torch._dynamo.reset()
    return row


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(1)
    ctx = world_of_one(torch.device("cpu"))
    print(f"# torch {torch.__version__}, one thread, float32, tiny configs; median process CPU ms per forward of "
          f"{args.repeat} and Python function calls per forward; graphs over {args.calls} compiled forwards (late: "
          "built after the first: recompiles)")
    header = (f"{'family':<11} {'plain':>12} {'hooked':>12} | {'plain c':>12} {'graphs':>6} {'late':>4} | "
              f"{'hooked c':>12} {'graphs':>6} {'late':>4} | {'max diff':>8}")
    print(header + "\n" + "-" * len(header), flush=True)
    for family in args.families:
        r = run_family(family, args, ctx)

        def cell(name):
            return f"{r[name]:>5.2f} {r[name + ' calls']:>6}"

        print(f"{family:<11} {cell('plain')} {cell('hooked')} | {cell('plain compiled')} "
              f"{r['plain compiled graphs']:>6} {r['plain compiled late']:>4} | {cell('hooked compiled')} "
              f"{r['hooked compiled graphs']:>6} {r['hooked compiled late']:>4} | "
              f"{max(r['diff'], r['diff compiled']):>8.1e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
