"""The collective watchdog: a hang names the rank that never arrived.

Every rank runs one :class:`.thread.Watchdog` (a daemon thread; ``launch.py`` starts it and hands
it to the :class:`~sporch.runtime.parallel.ParallelContext` and the Progress, there is no
process-global one). Each collective the runtime issues is wrapped::

    with watchdog.collective("ulysses_qkv", ranks, kind="all_to_all", group="ulysses", layer=3):
        dist.all_to_all_single(...)

(``ctx.collective(name, dim, kind=...)`` does it for a mesh group.) Entering one costs a few
attribute stores: the rank's current collective (name, kind, group and its ranks, its number
``seq`` among this rank's collectives on that group, layer, step, start time). Nothing is
written while the job is healthy. On NCCL the call only enqueues the collective (the rank
blocks later, at some synchronisation): a CUDA event recorded after it (``marker``) keeps the
collective the rank's until the device has finished it.

When the current collective has waited longer than the timeout
(:func:`sporch.orchestrator.hangs.collective_timeout_s`: ``resources.collective_timeout``,
``$SPORCH_COLLECTIVE_TIMEOUT_S``, default 300 s or a quarter of the time limit), the rank:

1. writes ``<job_dir>/hang/rank<N>.txt`` (where it waits, then faulthandler's stacks of all its
   threads) and ``hang/rank<N>.json`` (the record, :mod:`sporch.orchestrator.hangs`);
   with PyTorch's flight recorder on (``TORCH_FR_BUFFER_SIZE``, set by the batch script on GPU
   clusters) also its buffer of this rank's collectives (``hang/fr_trace_rank_<N>``);
2. raises the alert in the job's rendezvous store (the c10d store: no shared-file polling).
   Every other rank's watchdog checks the alert each poll (``timeout / 10``, 0.2 to 5 s) and,
   collective or not, writes its own stacks and record the same way (``state: alerted``): a
   rank that sleeps before its all-to-all shows where it sleeps;
3. once every rank has written (or a grace of a few seconds has passed), calls ``on_hang``
   (launch.py writes the rank's ``ranks/rank<N>.json``); rank 0 then reads the records,
   :func:`~sporch.orchestrator.hangs.diagnose` names the ranks that never arrived,
   and ``on_diagnosis`` writes ``result.json`` with that line;
4. exits with :data:`~sporch.orchestrator.contract.exit_codes.EXIT_HUNG` (``srun
   --kill-on-bad-exit`` and the local runner end the job).

The process group's own timeout is set above the watchdog's
(:func:`~sporch.orchestrator.hangs.pg_timeout_s`), so gloo and NCCL give up later.

Fault injection, for tests only: :func:`sporch.runtime.faults.hang_before` names a rank that
sleeps before a collective (docs/settings.md); without it nothing changes.

Torch-free: the store is passed in (``torch.distributed``'s default store).

One module per job (this file holds no code; import from the module):

* :mod:`.collectives`: what the rank is in: ``Collective`` (one collective's record) and
  ``CollectiveTracker`` (the hot path: entering and leaving a collective, the ones an
  asynchronous backend still runs, the injected hang)
* :mod:`.thread`: ``Watchdog``, the tracker watched by a daemon thread that notices a hang and
  runs the steps above; ``job_timeout_s`` (the collective timeout of this run)
* :mod:`.rendezvous`: the hang's keys in the job's rendezvous store and the calls on it (the
  alert, the counts the ranks wait for, each rank's host)
* :mod:`.hang_files`: ``hang/``: the stack file's header, writing the rank's stack file, flight
  recorder dump and record, reading every rank's records back
* :mod:`.stacks`: where the Python threads are: the main thread's frame, every thread's stack on
  SIGTERM
"""
