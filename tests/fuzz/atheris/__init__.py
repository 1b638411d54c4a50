"""Coverage-guided fuzzing with atheris (libFuzzer for Python): one harness per target.

    python -m tests.fuzz.atheris.frames -runs=100000          # one harness, libFuzzer flags
    python -m tests.fuzz.atheris.run --runs 250000             # every harness, one after another

Harnesses: ``frames`` (FrameReader + parse_request), ``dispatcher`` (the broker's KafkaProtocol
and handlers), ``batches`` (produce-path record-batch validation and appends), ``recovery``
(a segment's recovery scan at start-up).  See docs/reliability.md, "Bad input at scale".
"""
