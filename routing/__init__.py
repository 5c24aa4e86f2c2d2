"""The pure core of SiftStream: algorithms over numpy and scipy, no Spark, no Kafka.

The subpackages form layers; each imports only the ones listed before it
(``tests/unit/test_architecture.py`` holds the order and the purity rule):

common
    Reading the offline commands' JSON documents with errors that name the item.
stats
    Mergeable summaries (moments, tallies, the delay sketch, rolling windows), confidence
    intervals and the time distributions of the reliability model.
matching
    The filter language, the matching index and the live subscription table.
planning
    Overlay topologies, min-cost event distribution under policy constraints (with its exact
    solver and an independent checker) and loop-free routing on cyclic overlays.
composite
    Composite subscriptions: their language, detection in event time, and where to detect them.
reliability
    The subscriber reliability model: the system, its simulator, the queueing formulas, the
    prediction with its explanations, and estimation of the inputs from telemetry.
channels
    Delivery channels: subscriptions grouped into at most K channels with few false positives,
    and the multicast group counts they are weighed against.
monitors
    Each streaming job's Spark-free step (QoS, routes, composites): state in, batch in,
    records out.

Examples
--------
>>> from routing import matching
>>> matching.parse_filter("price < 120 and symbol = 'IBM'").matches({"price": 99, "symbol": "IBM"})
True
"""

LAYERS = ("common", "stats", "matching", "planning", "composite", "reliability", "channels", "monitors")
"""The subpackages, lowest first: a module may import from its own layer and those before it."""

__all__ = ["LAYERS"]
