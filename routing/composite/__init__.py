"""Composite subscriptions: their language, detection in event time, and where to detect them.

A composite subscription is a tree of ``and``, ``or`` and ``seq`` operators over atomic filters
(docs/reference/composites.md), for example a flight under $400 and a hotel within an hour. This
family parses such trees and keeps the live ones, detects composite events from the matches of
their leaves with watermarks, and decides at which broker of the overlay each operator is
detected (Li & Jacobsen §4; docs/reference/placement.md).

Modules
-------
trees
    The composite language: :func:`parse_composite` (:class:`CompositeError` naming the node),
    :class:`CompositeTree` of :class:`Operator` and :class:`Leaf` nodes with stable ids, output
    rates, and :class:`CompositeTable`, the live composite subscriptions.
detection
    :class:`CompositeDetector`: detection in event time with watermarks and bounded state, its
    columnar output (:class:`Detections`), and the oracle :func:`detect_reference`.
placement
    Where to detect each operator: :func:`place` (``optimal``, ``adaptive``, ``joint-point``,
    listed in :data:`PLACEMENT_METHODS`) over a :class:`PlacementInstance`, the traffic and delay
    costs, and :func:`plan_placement`, the whole ``siftstream plan placement`` command.
replay
    A trace-driven replay of detection on an overlay that measures a placement's traffic and
    delay (used by ``bench/placement.py``).

Imports go one way: ``detection`` and ``replay`` read ``trees``; ``placement`` reads only the
JSON helpers of ``routing.common``. ``placement`` has its own small tree and overlay types
(``Leaf``, ``Operator``, ``Node``, ``Link``, ``OPS``) for the placement document: here ``Leaf``,
``Operator``, ``Node`` and ``OPS`` are the language's (``trees``), and the placement ones stay in
``routing.composite.placement``, as does ``Decision``. ``placement.METHODS`` is
:data:`PLACEMENT_METHODS` here. The replay's names (``Network``, ``Composite``, ``detect``,
``replay``, ...) are its own vocabulary and stay in ``routing.composite.replay``.

Examples
--------
>>> from routing import composite
>>> tree = composite.parse_composite({"op": "and", "within_ms": 100, "children": ["x = 1", "y = 1"]})
>>> det = composite.CompositeDetector()
>>> det.add("cs1", tree, subscriber_id="u1")
>>> det.update([("cs1", "L1", "e1", 1000), ("cs1", "L2", "e2", 1050)])
>>> [r["detection_id"] for r in det.advance(1051)]
['["cs1",[["0","e1"],["1","e2"]]]']
>>> doc = {"brokers": ["b1", "b2"], "links": [{"from": "b1", "to": "b2", "cost": 1.0},
...                                            {"from": "b2", "to": "b1", "cost": 1.0}],
...        "sources": [{"leaf": "L1", "broker": "b2", "rate": 10.0}, {"leaf": "L2", "broker": "b2", "rate": 1.0}],
...        "subscription": {"id": "cs1", "broker": "b1", "tree": composite.to_placement_tree(tree)}}
>>> composite.plan_placement(doc, "optimal")["placement"]
{'n1': 'b2'}
"""

from routing.composite.detection import (
    ComponentRecord,
    CompositeDetector,
    DetectionBlock,
    DetectionRecord,
    DetectionRow,
    Detections,
    DetectionSource,
    DetectorConfig,
    DetectorStats,
    ReferenceResult,
    detect_reference,
    detection_id,
)
from routing.composite.placement import METHODS as PLACEMENT_METHODS
from routing.composite.placement import (
    PlacementError,
    PlacementInstance,
    PlacementResult,
    delay_cost,
    place,
    place_adaptive,
    place_joint_point,
    place_optimal,
    plan_placement,
    traffic_cost,
)
from routing.composite.trees import (
    MAX_DEPTH,
    MAX_LEAVES,
    MAX_WITHIN_MS,
    OPS,
    CompositeChange,
    CompositeError,
    CompositeOutcome,
    CompositeSubscription,
    CompositeTable,
    CompositeTree,
    Leaf,
    Node,
    Operator,
    filter_id,
    leaf_filter_changes,
    leaves,
    output_rate,
    output_rates,
    parse_composite,
    plan_composite_change,
    split_filter_id,
    to_json,
    to_placement_tree,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_LEAVES",
    "MAX_WITHIN_MS",
    "OPS",
    "PLACEMENT_METHODS",
    "ComponentRecord",
    "CompositeChange",
    "CompositeDetector",
    "CompositeError",
    "CompositeOutcome",
    "CompositeSubscription",
    "CompositeTable",
    "CompositeTree",
    "DetectionBlock",
    "DetectionRecord",
    "DetectionRow",
    "DetectionSource",
    "Detections",
    "DetectorConfig",
    "DetectorStats",
    "Leaf",
    "Node",
    "Operator",
    "PlacementError",
    "PlacementInstance",
    "PlacementResult",
    "ReferenceResult",
    "delay_cost",
    "detect_reference",
    "detection_id",
    "filter_id",
    "leaf_filter_changes",
    "leaves",
    "output_rate",
    "output_rates",
    "parse_composite",
    "place",
    "place_adaptive",
    "place_joint_point",
    "place_optimal",
    "plan_composite_change",
    "plan_placement",
    "split_filter_id",
    "to_json",
    "to_placement_tree",
    "traffic_cost",
]
