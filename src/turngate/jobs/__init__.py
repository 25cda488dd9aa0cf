"""The job runtime: cases (named collections of documents), and the ``case.ingest``,
``case.embed`` and ``case.index`` jobs that turn them into a searchable, versioned index.

Pure pieces (no Temporal): ``parsing``, ``chunking``, ``embedders``, ``index``, ``retrieval``,
``segments``, ``models``. Temporal pieces: ``heartbeat`` (activity progress), ``workers``
(``job_workers``), ``status`` (start/read/list/cancel for the API and CLI). The workflows and
activities live in ``turngate.workflows.jobs`` and ``turngate.activities.jobs``. See docs/JOBS.md.
"""
