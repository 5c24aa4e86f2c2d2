"""Avro schemas of every SiftStream topic (``*.avsc``), the one codec, topics and validation rules.

Every byte a SiftStream job or producer reads or writes is decoded or encoded here:

- ``codec``: single-object Avro framing and the codec of every schema (``fastenc``: its compiled
  encoder; ``compat``: the backward-compatibility check of schema versions);
- ``rules``: the validation rules of the input records, and the dead letter of a bad record;
- ``topics``: every topic's name (as a constant), schema, key and Kafka settings;
- ``columnar``, ``segments``: whole batches at once, decoded from and laid out into Arrow-style
  buffers; ``event_records``, ``match_records`` and ``detection_records`` build the matching and
  composites jobs' inputs and outputs on them.
"""

__all__ = [
    "codec",
    "columnar",
    "compat",
    "detection_records",
    "event_records",
    "fastenc",
    "match_records",
    "rules",
    "segments",
    "topics",
]
