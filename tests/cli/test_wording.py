"""Counts with their nouns in the right number (issue 51, D): ``1 node``, ``1 block``, ``2 points
in 1 group``, never ``1 nodes``, ``1 blocks`` or ``node(s)``."""

from __future__ import annotations

import re

from tests.cli.test_bad_input_hardening import one_line_error
from tests.testutil import EXAMPLES, write

TINY = EXAMPLES / "tiny.yaml"
WRONG = re.compile(r"\b1 (nodes|blocks|points|groups|GPUs|ranks|runs)\b|\(s\)")


def test_a_plan_of_one_node_and_one_block(run_cli):
    code, out, err = run_cli("plan", "--cluster", "a100x8", TINY, "model.depth=1", "parallel.ulysses=4")
    assert code == 0, err
    flat = " ".join(out.split())
    assert "a100x8: 1 node x 8 GPUs" in flat and "1 block," in flat
    assert not WRONG.search(flat), WRONG.search(flat)


def test_a_refusal_on_one_node(run_cli):
    code, out, err = run_cli("plan", "--cluster", "a100x8", TINY, "parallel.ulysses=4", "parallel.ring=4")
    line = one_line_error(code, out, err, "a100x8 has 1 node x 8 GPUs = 8")
    assert not WRONG.search(line)


def test_a_campaign_plan_of_one_group(run_cli, tmp_path):
    path = write(tmp_path, "c.yaml", "base: {model: {preset: tiny}, workload: {kind: benchmark, frames: 9, height: 64, "
                 "width: 64, dtype: float32}}\nmatrix: {clusters: [slurmlab], nodes: [1], layouts: [{ulysses: 2}, "
                 "{ring: 2, ulysses: 1}]}\n")
    code, out, err = run_cli("campaign", "plan", path)
    assert code == 0, err
    flat = " ".join(out.split())
    assert "2 points in 1 group " in flat and "1 node x 2 GPUs" in flat and "- 2 points" in flat
    assert not WRONG.search(flat), WRONG.search(flat)
