"""Starting and stopping the real components: JVM jars, the Kafka broker, topics, Spark standalone.

- ``connection``: how SiftStream reaches Kafka (one frozen config for both client stacks);
- ``jars``: the JVM jars from Maven Central, cached outside git;
- ``kafka``: a single-node KRaft broker (``up``, ``down``, ``status``, ``broker_or``);
- ``topics``: every SiftStream topic, created idempotently;
- ``spark_cluster``: a loopback Spark standalone cluster.
"""

__all__ = [
    "connection",
    "jars",
    "kafka",
    "spark_cluster",
    "topics",
]
