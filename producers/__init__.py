"""Everything that writes input to Kafka: workload generators, fault injection, the Kafka writer.

- ``workloads``: the presets modelled on the papers' setups (``PRESETS``), and ``events``: the
  simple built-in event generator; ``replay``: recorded events from files, as a workload;
- ``columns``: events as numpy columns, encoded as JSON Lines or Avro a whole batch at a time;
- ``sinks``: Kafka topics or JSON Lines files, and the loop that drives a workload into one;
  ``kafka_writer``: the confluent-kafka writer that counts every record's fate;
- ``produce``: ``siftstream produce events``; ``faults``: deliberately bad records;
- ``overlay``: the overlay simulator's output as SiftStream records.
"""

__all__ = [
    "columns",
    "events",
    "faults",
    "kafka_writer",
    "overlay",
    "produce",
    "replay",
    "sinks",
    "workloads",
]
