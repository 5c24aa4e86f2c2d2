"""Spark Structured Streaming jobs, the command line and their thin adapters over ``routing``.

Each job reads as decode (``schemas``, or :mod:`streaming.decode` in the JVM) -> ``routing`` ->
encode (``schemas``): ``validation_job``; ``matching_job`` with ``arrow_matching`` (its Python
workers) and ``subscription_store``; the driver-state jobs on ``driver_batch``: ``qos_job``,
``routes_job`` and ``composites_job``. ``session`` builds the SparkSession, ``readers`` reads
topics back, ``match_log`` is ``siftstream match``, ``demo`` is ``siftstream run`` and ``cli`` the
``siftstream`` command.
"""

__all__ = [
    "arrow_matching",
    "cli",
    "composites_job",
    "decode",
    "demo",
    "driver_batch",
    "match_log",
    "matching_job",
    "qos_job",
    "readers",
    "routes_job",
    "session",
    "subscription_store",
    "validation_job",
]
