"""Submission from a laptop: an SSH connection to the cluster's login host (paramiko).

Imports nothing heavy at import time; paramiko is imported when a connection is made.
"""
