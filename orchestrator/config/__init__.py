"""Typed configuration: cluster descriptors (cluster.py) and job specs (job.py)."""
