"""A case's data, from documents to a searchable index: parsing, stored chunk and embedding
segments, the embedders, the SQLite index and its retrieval, the case registry of job outputs,
and ``case_query`` (what a turn's declared case query reads). No Temporal: the job activities
and the turn's external-reference activity call these.
"""
