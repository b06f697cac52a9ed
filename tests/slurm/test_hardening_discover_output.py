"""Issue 32 item 3: ``clusters discover -o FILE`` by the one rule: a link (or file) at FILE is
refused without --force, before Slurm is asked; with --force the link is replaced by the
descriptor and the file it pointed at is untouched (it was written through before)."""

from __future__ import annotations

VICTIM = "name: the-users-own-cluster\n"


def test_discover_output_replaces_a_link_never_writes_through_it(slurm_cluster, tmp_path, run_cli):
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "mine.yaml"
    victim.write_text(VICTIM)
    out = tmp_path / "lab.yaml"
    out.symlink_to(victim)
    code, _, err = run_cli("clusters", "discover", "-p", slurm_cluster.partition, "-o", out)
    assert code == 2 and "--force" in err and len(err.strip().splitlines()) == 1, err
    code, _, err = run_cli("clusters", "discover", "-p", slurm_cluster.partition, "-o", out, "--force")
    assert code == 0, err
    assert not out.is_symlink() and "gpus_per_node" in out.read_text() and victim.read_text() == VICTIM
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lab.yaml", "outside"]
