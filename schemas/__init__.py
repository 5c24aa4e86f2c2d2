"""Avro schemas of every SiftStream topic (``*.avsc``), the one codec, topics and validation rules."""
