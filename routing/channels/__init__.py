"""Channel planning: group subscriptions into at most K delivery channels with few false positives.

A channel is a Kafka topic that carries every event one of its members matches; whatever a
member receives without wanting it is a false positive (Tariq ch. 3; Opyrchal et al. §2.6). This
family reads the instance of ``siftstream plan channels``, derives the match sets with the
project's matcher, computes the exact metrics of a plan and implements every method of
docs/reference/channels.md.

Modules
-------
groups
    The multicast group counts of Opyrchal et al. (:func:`group_counts`, :func:`cgm_max_endpoints`).
instance
    :class:`ChannelInstance` (the JSON instance, with :class:`ChannelError` naming the item) and
    :class:`ExactLimitError`.
match_sets
    The match matrix (:func:`derive_hits`) and a plan's metrics (:func:`plan_metrics`, with its
    set-based oracle).
similarity
    Recent-event windows R(s), the Jaccard similarity J and isolated subscriptions.
kmeans
    k-means with the contract's exact seeding, iteration, restart and tie rules.
methods
    flooding, ideal, exact, ck, ov, kmeans, spectral-rassoc, spectral-ncut, approx, the join
    rule and the numbering of channels.
planner
    :func:`plan_channels`: one method (or ``auto``) on an instance, the output document;
    :func:`recluster`: the same methods on a live sample's match matrix (the channels job).
assignment
    Assignment versions, the channels an event is written to, and the client's hand-over
    (:class:`Assignment`, :class:`Follower`; docs/reference/delivery.md).

Examples
--------
>>> from routing import channels
>>> inst = channels.ChannelInstance.from_json({"k": 1, "subscriptions": [
...     {"subscription_id": "a", "subscriber_id": "u", "filter": "x > 1"},
...     {"subscription_id": "b", "subscriber_id": "u", "filter": "x > 2"}],
...     "events": [{"event_id": "e1", "attributes": {"x": 2}}, {"event_id": "e2", "attributes": {"x": 3}}]})
>>> channels.plan_channels(inst, "exact")["summary"]["false_positives"]
1
>>> channels.group_counts(4, 2)["groups"]["cgm"]
8
"""

from routing.channels.assignment import LOBBY, Assignment, Follower
from routing.channels.groups import cgm_max_endpoints, group_counts
from routing.channels.instance import ChannelError, ChannelInstance, Domain, ExactLimitError
from routing.channels.kmeans import kmeans
from routing.channels.match_sets import PlanMetrics, derive_hits, plan_metrics, plan_metrics_by_sets
from routing.channels.methods import (
    AUTO_BASELINES,
    AUTO_RUN_ORDER,
    BOUNDED_METHODS,
    CHANNEL_METHODS,
    EXACT_LIMIT,
    ChannelUnions,
    approx,
    exact,
    exact_by_enumeration,
    join_isolated,
    net_waste_induced,
    number_channels,
)
from routing.channels.planner import DEFAULT_BUDGET_MS, DEFAULT_METHOD, RECLUSTER_METHODS, plan_channels, recluster
from routing.channels.similarity import isolated, jaccard, jaccard_by_sets, recent_windows

__all__ = [
    "AUTO_BASELINES",
    "AUTO_RUN_ORDER",
    "BOUNDED_METHODS",
    "CHANNEL_METHODS",
    "DEFAULT_BUDGET_MS",
    "DEFAULT_METHOD",
    "EXACT_LIMIT",
    "LOBBY",
    "RECLUSTER_METHODS",
    "Assignment",
    "ChannelError",
    "ChannelInstance",
    "ChannelUnions",
    "Domain",
    "ExactLimitError",
    "Follower",
    "PlanMetrics",
    "approx",
    "cgm_max_endpoints",
    "derive_hits",
    "exact",
    "exact_by_enumeration",
    "group_counts",
    "isolated",
    "jaccard",
    "jaccard_by_sets",
    "join_isolated",
    "kmeans",
    "net_waste_induced",
    "number_channels",
    "plan_channels",
    "plan_metrics",
    "plan_metrics_by_sets",
    "recent_windows",
    "recluster",
]
