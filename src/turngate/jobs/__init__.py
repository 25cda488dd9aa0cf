"""Case jobs: cases (named collections of documents), and the ``case.ingest``, ``case.embed`` and
``case.index`` jobs that turn them into a searchable, versioned index. The whole feature lives
here, one part per layer (each imports only the parts listed after it; the import contracts in
pyproject.toml check it):

- ``cli/``: ``turngate jobs`` and ``turngate cases``, a client of the HTTP API;
- ``routes``: the HTTP side (job submission from ingress, ``/jobs``, ``/cases``, ``/artifacts``);
- ``workers``: the Temporal workers the worker process runs, one per job type;
- ``activities`` (with ``heartbeat``, its progress and resume cursor): the work itself;
- ``workflows``: one per job type, calling its activity by name (never importing it);
- ``control``: start, read, list and cancel jobs through a Temporal client (API, tests, bench);
- ``cases/``: a case's data, from documents to index, without Temporal;
- ``domain/``: what a job is (types, inputs, results, intents, names), pure and light.

See docs/JOBS.md.
"""
