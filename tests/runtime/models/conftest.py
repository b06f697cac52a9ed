"""Fixtures shared by the model tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def derived_verdicts():
    """Every family's derived split plan (``family_spec``: CogView4, Lumina 2, Chroma, SkyReels-V2) and the
    classes test_derived_plans.py checks besides (SkyReels-V2 with diffusion forcing, SANA, Mochi: their
    tests/runtime/models/derive_specs.py specs) checked in ONE world on the rank pool; the families' verdicts
    cached where the ranks and `sporch run` read them (the session's temporary $SPORCH_HOME/split-plans).
    Without a cached verdict the first model of a derived class derives and checks it in a process and a
    world of its own. (families' verdicts, the others'), each {class name: verdict}."""
    pytest.importorskip("diffusers")
    from sporch.orchestrator.models.families import FAMILIES
    from sporch.orchestrator.models.families.derived_plans import write_verdict
    from sporch.runtime.derive_check import check, family_spec
    from tests.runtime.models.derive_specs import CANDIDATES

    derived = [c for f in FAMILIES for c in f.derived]
    others = ("SkyReelsV2Transformer3DModel", "SanaTransformer2DModel", "MochiTransformer3DModel")
    found = check([family_spec(c) for c in derived] + [CANDIDATES[c] for c in others])
    families = dict(zip(derived, found[:len(derived)]))
    for verdict in families.values():
        write_verdict(verdict)
    return families, dict(zip(others, found[len(derived):]))
