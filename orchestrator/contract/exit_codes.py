"""Exit codes of ranks and of the ``sporch`` commands (stdlib only).
"""

from __future__ import annotations

#: A rank (and ``sporch run``/``wait``) that finished its work.
EXIT_OK = 0
#: The work failed.
EXIT_FAILED = 1
#: Bad input (a SporchError).
EXIT_BAD_INPUT = 2
#: A rank that stopped on USR2 after saving progress, the job being requeued; ``sporch wait``
#: uses the same code for a job stopped from outside (CANCELLED, TIMEOUT, PREEMPTED).
EXIT_REQUEUED = 3
EXIT_STOPPED = 3
#: A rank that the collective watchdog stopped: a collective did not complete within the
#: collective timeout (it waited in it, or its peers did); <job_dir>/hang/ says where.
EXIT_HUNG = 4
#: ``python -m sporch.runtime.pack``: no point of the pack is left to run, and some of them failed
#: in this job (the batch script stops relaunching the pack and ends failed).
EXIT_PACK_FAILED = 5
