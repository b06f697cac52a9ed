"""The planner's facts about the generic path's split (contract/families, torch-free) against what
the runtime does: every family's ``text_split`` == whether the class's split plan cuts the text;
a plan that records another split than the generic path's is refused before anything runs."""

from __future__ import annotations

import pytest

pytest.importorskip("diffusers")

from sporch.orchestrator.models.families import FAMILIES  # noqa: E402
from sporch.orchestrator.models.families.plan_format import splits_text  # noqa: E402
from sporch.orchestrator.contract.sections import SequenceSection  # noqa: E402

CLASSES = [(fam, cls) for fam in FAMILIES for cls in fam.classes]


@pytest.mark.parametrize("fam, cls", CLASSES, ids=[c for _, c in CLASSES])
def test_family_text_split_is_the_split_plans(fam, cls, request):
    import diffusers

    from sporch.runtime.models.split_plans import split_plan

    if cls in fam.derived:  # the derived plan's verdict cached by the model tests' one world (conftest.py), not
        request.getfixturevalue("derived_verdicts")  # derived here in a process and a world of its own

    assert fam.text_split == splits_text(split_plan(getattr(diffusers, cls)))


def test_runtime_refuses_a_plan_recorded_for_another_split():
    import diffusers

    from sporch.runtime.models.split_plans import split_plan
    from sporch.runtime.models.sequence_split import check_recorded_split, chunk_sizes

    plan = split_plan(diffusers.LTXVideoTransformer3DModel)
    check_recorded_split(SequenceSection.build(10, [1, 2, 5], 4, split="uneven", text_len=7), plan, "LTX")
    with pytest.raises(ValueError, match="records split 'padded'"):
        check_recorded_split(SequenceSection.build(10, [1, 2, 5], 4, text_len=7), plan, "LTX")
    with pytest.raises(ValueError, match="text cut"):
        check_recorded_split(SequenceSection.build(10, [1, 2, 5], 4, split="uneven"), plan, "LTX")
    assert chunk_sizes(10, 4) == SequenceSection.build(10, [1, 2, 5], 4, split="uneven").chunks() == [3, 3, 2, 2]
