"""Which GPU a rank binds: the rule as a pure function (no GPU needed)."""

from __future__ import annotations

import pytest

from sporch.runtime.distributed import DeviceError, gpu_index


def test_each_local_rank_gets_its_own_gpu():
    assert [gpu_index(rank=8 + i, local_rank=i, visible=8) for i in range(8)] == list(range(8))


def test_a_local_index_past_the_visible_gpus_is_refused_in_one_line():
    with pytest.raises(DeviceError) as exc:
        gpu_index(rank=5, local_rank=1, visible=1)
    msg = str(exc.value)
    assert "\n" not in msg
    assert "rank 5 (local index 1)" in msg and "only 1 GPU(s) visible" in msg and "tasks per node" in msg
    with pytest.raises(DeviceError, match=r"rank 3 \(local index 3\).*only 2 GPU"):
        gpu_index(rank=3, local_rank=3, visible=2)


def test_no_visible_gpu_is_refused():
    with pytest.raises(DeviceError, match=r"rank 0 \(local index 0\) sees no GPU"):
        gpu_index(rank=0, local_rank=0, visible=0)


def test_per_task_binding_uses_the_task_s_own_gpus():
    # Slurm --gpus-per-task=1: every task sees one GPU, its own, whatever its local index
    assert [gpu_index(rank=i, local_rank=i, visible=1, per_task=True) for i in range(4)] == [0, 0, 0, 0]
    # a task that still sees every GPU (binding overridden) keeps its local index: no sharing
    assert gpu_index(rank=3, local_rank=3, visible=8, per_task=True) == 3


def test_cpu_ranks_take_the_threads_slurm_gave_them():
    from sporch.runtime.distributed import cpu_threads

    assert cpu_threads({"OMP_NUM_THREADS": "3", "SLURM_CPUS_PER_TASK": "8"}) is None  # torch reads OMP itself
    assert cpu_threads({"SLURM_CPUS_PER_TASK": "4"}) == 4
    assert cpu_threads({"SLURM_CPUS_PER_TASK": "0"}) is None and cpu_threads({"SLURM_CPUS_PER_TASK": "x"}) is None
    assert cpu_threads({"LOCAL_WORLD_SIZE": "4"}, cores=16) == 4  # torchrun: the node's cores shared
    assert cpu_threads({"LOCAL_WORLD_SIZE": "8"}, cores=2) == 1
    assert cpu_threads({}) is None  # nothing says how many ranks share the node: torch's default
