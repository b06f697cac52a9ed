"""``sporch clusters list|show``."""

from __future__ import annotations

import click

from orchestrator.cli.common import console


@click.group("clusters")
def clusters() -> None:
    """List and show cluster descriptors."""


@clusters.command("list")
def list_cmd() -> None:
    """Every known cluster (built-in, $SPORCH_CLUSTERS, ~/.config/sporch/clusters)."""
    from rich.table import Table

    from orchestrator.config.cluster import available_clusters, load_cluster_file, search_dirs
    from orchestrator.errors import SporchError

    table = Table(title="clusters")
    for col in ("name", "nodes x GPUs", "GPU", "intra-node", "inter-node", "source"):
        table.add_column(col)
    for name, (label, path) in sorted(available_clusters().items()):
        try:
            c = load_cluster_file(path)
        except SporchError as e:
            table.add_row(name, "-", "-", "-", "-", f"{label} (invalid: {e})")
            continue
        table.add_row(
            name,
            f"{c.nodes} x {c.gpus_per_node}",
            f"{c.gpu.model} {c.gpu.memory_gib:g} GiB",
            f"{c.intra_node.fabric} {c.intra_node.gb_per_s:g} GB/s/GPU",
            f"{c.inter_node.fabric} {c.inter_node.gb_per_s:g} GB/s/node",
            label,
        )
    console().print(table)
    for label, folder in search_dirs():
        state = "" if folder.is_dir() else " (missing)"
        click.echo(f"{label}: {folder}{state}")


@clusters.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the resolved descriptor as JSON.")
def show_cmd(name: str, as_json: bool) -> None:
    """The resolved descriptor of NAME (a name or a YAML path), env defaults included."""
    import json

    from orchestrator.config.cluster import find_cluster

    c = find_cluster(name)
    d = c.to_dict()
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    from omegaconf import OmegaConf

    click.echo(f"# {c.name}: {c.summary()} ({c.source})")
    click.echo(OmegaConf.to_yaml(OmegaConf.create(d)).rstrip())
