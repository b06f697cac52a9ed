"""``sporch clusters list|show|discover``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from sporch.orchestrator.cli.common import console, plain_table
from sporch.orchestrator.cli.terminal import echo, visible
from sporch.orchestrator.contract.numbers import counted
from sporch.orchestrator.config.cluster import (bandwidth_warnings, cluster_files, find_cluster, load_cluster_file,
                                                search_dirs)
from sporch.orchestrator.safe_files import check_output, write_output
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.slurm.discover import descriptor_yaml, discover_cluster


@click.group("clusters", short_help="List and show cluster descriptors.")
def clusters() -> None:
    """List and show cluster descriptors."""


@clusters.command("list")
def list_cmd() -> None:
    """Every known cluster (built-in, $SPORCH_CLUSTERS, ~/.config/sporch/clusters)."""
    table = plain_table(title="clusters")
    for col in ("name", "nodes x GPUs", "GPU", "intra-node", "inter-node", "source"):
        table.add_column(col)
    notes = []
    for name, files in sorted(cluster_files().items()):
        label, path = files[0]
        source = f"{label}: {path}" + "".join(f" (over {other}: {p})" for other, p in files[1:])
        try:
            c = load_cluster_file(path)
        except SporchError as e:
            table.add_row(name, "-", "-", "-", "-", f"{source} (invalid: {e})")
            continue
        notes += bandwidth_warnings(c)
        table.add_row(
            name,
            f"{c.nodes} x {c.gpus_per_node}",
            f"{c.gpu.model} {c.gpu.memory_gib:g} GiB",
            f"{c.intra_node.fabric} {c.intra_node.gb_per_s:g} GB/s/GPU",
            f"{c.inter_node.fabric} {c.inter_node.gb_per_s:g} GB/s/node",
            source,
        )
    console().print(table)
    for line in notes:
        echo(visible(f"warning: {line}", one_line=True), err=True, indent=4)
    for label, folder in search_dirs():
        state = "" if folder.is_dir() else " (missing)"
        echo(visible(f"{label}: {folder}{state}", one_line=True), indent=4)


@clusters.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the resolved descriptor as JSON.")
def show_cmd(name: str, as_json: bool) -> None:
    """The resolved descriptor of NAME (a name or a YAML path), env defaults included."""
    c = find_cluster(name)
    for line in bandwidth_warnings(c):
        echo(visible(f"warning: {line}", one_line=True), err=True, indent=4)
    d = c.to_dict()
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    from omegaconf import OmegaConf

    click.echo(f"# {c.name}: {c.summary()} ({c.source})")
    for label, path in cluster_files().get(name, [])[1:]:
        click.echo(f"# (it is used instead of the {label} descriptor {path})")
    click.echo(OmegaConf.to_yaml(OmegaConf.create(d)).rstrip())


@clusters.command("discover")
@click.option("--partition", "-p", default=None, help="Partition to describe (default: the default partition).")
@click.option("--name", default=None, help="Cluster name (default: Slurm's ClusterName, plus the partition).")
@click.option("--output", "-o", "output", default=None, type=click.Path(dir_okay=False),
              help="Write the descriptor here (default: print it).")
@click.option("--force", is_flag=True, help="Replace --output if it exists (a link there is replaced, never followed).")
def discover_cmd(partition, name, output, force) -> None:
    """Write a cluster descriptor from the live cluster (sinfo/scontrol).

    Node count, CPUs, memory, GPU gres count and type, features and the time limit come from
    Slurm; what Slurm cannot know (GPU memory/TFLOP/s, fabric bandwidths) is guessed and
    marked ``# guessed`` so you can fill it in.
    """
    if output is not None:  # before asking Slurm: a name that is taken is refused (safe_files)
        check_output(Path(output).expanduser(), force, "-o")
    desc = discover_cluster(partition, name=name)
    text = descriptor_yaml(desc)
    guessed = ", ".join(desc.get("guessed", [])) or "nothing"
    if output is None:
        click.echo(text, nl=False)
        click.echo(f"# guessed (check these): {guessed}", err=True)
        return
    path = Path(output).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_output(path, text, force=force, option="-o")
    obs = desc.get("observed", {})
    echo(f"wrote {path}: {desc['name']}, partition {desc['slurm']['partition']}, {counted(desc['nodes'], 'node')} x "
         f"{desc['gpus_per_node']} GPUs ({obs.get('gres_type') or 'untyped'} gres), "
         f"{obs.get('cpus_per_node')} CPUs and {obs.get('mem_mb_per_node')} MB per node", indent=10)
    echo(f"guessed   {guessed} (marked '# guessed'; fill in the real values)", indent=10)
    echo(f"use it    sporch plan --cluster {path} JOB.yaml", indent=10)
