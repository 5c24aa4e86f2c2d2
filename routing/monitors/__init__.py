"""Each streaming job's Spark-free step: its state, a micro-batch's records in, records out.

The QoS, routes, composites and channels jobs (``streaming/``) keep their whole state in one of these
objects, feed it each micro-batch's decoded records, and write what it returns. Each object's
state round-trips through ``to_bytes`` and ``from_bytes``, so that a restarted job replays a
batch exactly.

Modules
-------
qos
    :class:`QosMonitor` (configured by :class:`QosMonitorConfig`): the overlay's shape, rolling
    telemetry estimates and each publisher's content mix; per update period one ``QosReport``
    per subscriber and per broker, predicted against measured, with alerts.
routes
    :class:`RoutePlanner` (configured by :class:`PlannerConfig`): the live MICPICE instance,
    re-planned on drift with hysteresis; one ``RoutePlan`` record per re-plan.
composites
    :class:`CompositeMonitor` (configured by :class:`CompositeMonitorConfig`): the leaves of the
    composite subscriptions matched in one index, detection in event time, and where each
    subscription's detection is placed.
channels
    :class:`ChannelMonitor` (configured by :class:`ChannelMonitorConfig`): live subscriptions, a
    ring of recent matched events, and the assignment of subscriptions to K delivery channels;
    new subscriptions placed by the join rule, re-clustering on drift with hysteresis; one
    planned ``ChannelAssignment`` version per change.

Examples
--------
>>> from routing import monitors
>>> planner = monitors.RoutePlanner(monitors.PlannerConfig(check_period_ms=1000))
>>> planner.to_bytes() == monitors.RoutePlanner.from_bytes(planner.to_bytes()).to_bytes()
True
"""

from routing.monitors.channels import ChannelMonitor, ChannelMonitorConfig
from routing.monitors.composites import CompositeMonitor, CompositeMonitorConfig
from routing.monitors.qos import QosMonitor, QosMonitorConfig, SubscriptionWish
from routing.monitors.routes import PlannerConfig, RoutePlanner

__all__ = [
    "ChannelMonitor",
    "ChannelMonitorConfig",
    "CompositeMonitor",
    "CompositeMonitorConfig",
    "PlannerConfig",
    "QosMonitor",
    "QosMonitorConfig",
    "RoutePlanner",
    "SubscriptionWish",
]
