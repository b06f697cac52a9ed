"""Submission. ``request.py`` builds a pure, dry-run SubmitRequest; real backends (local
sbatch, ssh) come in later modules of this package."""
