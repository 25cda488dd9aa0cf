"""What a case job is: job types, inputs, results and status, the intents that submit them, the
Temporal names and queues, and the chunking, embedder and index parameters.

Pure and light (pydantic and ``turngate.core`` only): the API validates and starts jobs with it
without loading numpy, the document parsers or the embedding SDKs.
"""
