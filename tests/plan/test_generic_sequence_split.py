"""How the planner cuts the sequence, recorded once in ``plan.sequence`` (``split``, ``text_len``):
every model's sequence is cut unpadded (``contract.parallel.sequence_chunks``, the rule
runtime/models/sequence_split.py cuts with) and cuts the text with the image's where its family's
split plan does (LTX-Video's cross-attention too, so the text's keys and values are no longer
counted whole on every rank)."""

from __future__ import annotations

import json

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.contract.parallel import sequence_chunks
from sporch.orchestrator.plan.estimates import context_flops_per_sample
from sporch.orchestrator.plan.planner import make_plan

# 129 x 720 x 1280 video: 33 x 45 x 80 = 118,800 latent tokens, not a multiple of 32 ranks
VIDEO = dict(kind="benchmark", frames=129, height=720, width=1280, steps=50, guidance_scale=1.0)


def plan(preset: str, **workload):
    return make_plan(find_cluster("a100x32"), job_from_dict({"name": "s", "model": {"preset": preset},
                                                             "workload": {**VIDEO, **workload}}))


def test_sequence_chunks_are_tensor_split_chunks():
    assert sequence_chunks(10, 4) == [3, 3, 2, 2]
    assert sequence_chunks(8, 4) == [2, 2, 2, 2]
    assert sum(sequence_chunks(118_800, 32)) == 118_800


def test_generic_plan_records_the_uneven_split_and_its_text():
    p = plan("hunyuanvideo")
    s = p.sequence
    assert (s.split, s.seq_len, s.degree, s.tokens_per_rank) == ("uneven", 118_800, 32, 3713)
    assert s.chunks() == [3713] * 16 + [3712] * 16  # no padded token in any rank's per-token layers
    assert s.text_len == p.model.text_len == 256  # the text is cut with the video (joint attention)
    assert p.estimates.compute.text_tokens_per_rank == 8
    assert any("split unevenly" in w and "16 hold 3713" in w for w in p.warnings)
    assert not any("padded to" in w for w in p.warnings)
    assert json.loads(json.dumps(p.to_dict()))["sequence"]["split"] == "uneven"


def test_ltx_cross_attention_text_is_cut_not_whole_on_every_rank():
    """LTX-Video's _cp_plan cuts the text: plan.sequence.text_len records it, the text is counted
    in the sequence (per rank), and the cross-attention's whole-text keys/values are not."""
    p = plan("ltx-video-2b", frames=121, height=704, width=1216, guidance_scale=3.0)
    assert p.model.attention == "cross" and p.sequence.split == "uneven"
    assert p.sequence.text_len == p.model.text_len == 128
    assert p.estimates.compute.text_tokens_per_rank == 4
    assert p.estimates.compute.context_flops_per_sample == 0 < context_flops_per_sample(p.model)
