"""sporch runtime: runs on every rank (torch.distributed, device mesh, USP attention, DiT)."""
