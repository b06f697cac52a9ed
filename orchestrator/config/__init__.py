"""Typed configuration: cluster descriptors (cluster.py) and job specs (job_spec.py, loaded by job.py)."""
