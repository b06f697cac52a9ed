"""Every step cache on every generic family: steps skipped and output quality against the same run
without a cache (docs/performance.md, "Step caching", the generic path's table).

    python bench/step_cache_generic.py                   # 20 steps, every family, one CPU process
    python bench/step_cache_generic.py --steps 30 --only sd3 wan2.2

Each family's tiny run is tests/runtime/models/step_cache_subjects.py's: its tiny diffusers pipeline
(decoded frames in [0, 1], PSNR with peak 1) where the family has one, else a direct Euler loop on
its tiny config (the denoised latents, PSNR with the uncached latents' largest |value| as peak);
``wan2.2`` is that loop with two experts. Unsharded, float32: the tests show a sharded run takes
the same decisions (tests/runtime/models/test_generic_step_caches.py).

The thresholds follow each run's own measured changes, so every family skips about as much: fbcache
the median first-block change of a run without skipping, TeaCache twice the median probe change
(its sum reaches that about every other step), TaylorSeer interval 2 order 1, MagCache with the
ratios its threshold-0 run measured (result.json ``step_cache.changes``) and threshold 0.1. Warm-up
1 step, no cap on consecutive skips, the last step always computed. The tiny weights are random, so
the changes per step are large and the quality lower than a real model's at the same skips.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "runtime" / "model"))

from step_cache_subjects import make_subject, psnr, run_cached, subject_names  # noqa: E402

from sporch.orchestrator.contract.sections import CacheSection  # noqa: E402


def _median_change(subject, method: str) -> float:
    got = run_cached(subject, None, CacheSection(method=method, threshold=0.0))
    return statistics.median(c for r in got["records"].values() for c in r["changes"][1:-1] if c is not None)


def sections(subject) -> list[tuple[str, CacheSection]]:
    measured = run_cached(subject, None, CacheSection(method="magcache", threshold=0.0))
    ratios = [1.0 if c is None else c for c in next(iter(measured["records"].values()))["changes"]]
    fb, tea = _median_change(subject, "fbcache"), 2 * _median_change(subject, "teacache")
    return [(f"fbcache {fb:.3g}", CacheSection(method="fbcache", threshold=fb)),
            (f"teacache {tea:.3g}", CacheSection(method="teacache", threshold=tea)),
            ("taylorseer 2/1", CacheSection(method="taylorseer", interval=2, order=1)),
            ("magcache 0.1", CacheSection(method="magcache", threshold=0.1, ratios=ratios))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--only", nargs="*", default=None, help="subjects (families, wan2.2)")
    args = ap.parse_args()
    print("| family | output | cache | computed / skipped (first context) | PSNR dB |")
    print("|---|---|---|---|---|")
    for name in args.only or subject_names():
        subject = make_subject(name, args.steps)
        decode = subject.pipeline
        ref = run_cached(subject, None, None, decode=decode)["out"]
        what = "frames" if decode else "latents"
        for label, section in sections(subject):
            got = run_cached(subject, None, section, decode=decode)
            first = next(iter(got["records"].values()))
            score = psnr(got["out"], ref, 1.0 if decode else None)
            print(f"| {name} | {what} | {label} | {len(first['computed'])} / {len(first['skipped'])} | {score:.1f} |",
                  flush=True)


if __name__ == "__main__":
    main()
