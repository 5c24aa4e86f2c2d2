"""Overlay planning: broker topologies, min-cost event distribution, loop-free routing.

Where events travel through a network of brokers. This family builds the networks (the papers'
setups and GT-ITM-style generators), plans which events cross which links at least cost under
policy constraints and composite events (MICPICE, Chen et al. 2004; docs/reference/distribution.md),
checks any such plan on its own, and routes publications without loops on cyclic overlays
(Li & Jacobsen §3).

Modules
-------
topology
    :class:`Topology` (nodes, directed links), seeded generators (:func:`flat_random`,
    :func:`transit_stub`, ...), overlays and clients, and the exporters to the documents of
    ``siftstream qos predict`` and ``siftstream plan distribution`` and to the topology topic.
named_topologies
    The papers' setups by name (:data:`NAMED_TOPOLOGIES`), and :func:`generate_topology`, which
    builds any setup or generator by name (``siftstream topology``).
model
    The MICPICE model: :class:`Instance` (parsed and checked, :class:`InstanceError` naming the
    item), :class:`Plan`, and random instances as in the paper (:func:`chen_instance`).
heuristics
    :func:`plan_greedy` and :func:`plan_enhanced` (§3.3), with the subscriber orders of
    :data:`DISTRIBUTION_ORDERS`.
exact
    :func:`plan_exact`: a proven optimum from a mixed-integer program solved by HiGHS, for
    instances up to :data:`MAX_FLOW_SIZE`.
distribution
    :func:`plan_distribution`: one of :data:`DISTRIBUTION_METHODS` by name (the entry point of
    ``siftstream plan distribution`` and the routes job).
check
    :func:`check_plan`: an independent checker of any plan, sharing no code with the planners.
loop_free
    :class:`TidOverlay`: content-based routing with tree identifiers, and the
    :class:`LinkDelayTable` that chooses paths.

Imports go one way: ``named_topologies`` reads ``topology``; ``model`` reads both;
``heuristics``, ``exact`` and ``check`` read ``model``; ``distribution`` reads the planners.
Names that say nothing on their own at this level are qualified here: ``distribution.plan``
is :func:`plan_distribution`, ``distribution.METHODS`` :data:`DISTRIBUTION_METHODS`,
``heuristics.ORDERS`` :data:`DISTRIBUTION_ORDERS`, ``named_topologies.generate``
:func:`generate_topology` and ``named_topologies.NAMED`` :data:`NAMED_TOPOLOGIES`.
Validation constants (``topology.ROLES``, ``model.NODE_ROLES``, ...) and the message records of
``loop_free`` (``Hop``, ``Trace``, ``Delivery``, ...) stay in their modules.

Examples
--------
>>> from routing import planning
>>> inst = planning.chen_instance(planning.generate_topology("chen-flat-12", seed=3), seed=3)
>>> best = planning.plan_distribution(inst, "exact")
>>> planning.check_plan(inst, best).ok
True
>>> all(planning.plan_distribution(inst, m).cost >= best.cost - 1e-9 for m in planning.DISTRIBUTION_METHODS)
True
"""

from routing.planning.check import PlanCheck, check_plan
from routing.planning.distribution import METHODS as DISTRIBUTION_METHODS
from routing.planning.distribution import plan as plan_distribution
from routing.planning.exact import MAX_FLOW_SIZE, ExactNotProven, ExactTooLarge, commodity_count, plan_exact
from routing.planning.heuristics import ORDERS as DISTRIBUTION_ORDERS
from routing.planning.heuristics import plan_enhanced, plan_greedy
from routing.planning.loop_free import LinkDelayTable, TidOverlay
from routing.planning.model import (
    Event,
    Generation,
    Instance,
    InstanceError,
    Plan,
    Transmission,
    chen_events,
    chen_instance,
    infeasible_plan,
)
from routing.planning.named_topologies import NAMED as NAMED_TOPOLOGIES
from routing.planning.named_topologies import (
    chen_flat_12,
    chen_flat_100,
    chen_transit_stub_100,
    opyrchal_fig5,
    reliability_tree,
)
from routing.planning.named_topologies import generate as generate_topology
from routing.planning.topology import (
    DEFAULT_TS_COSTS,
    OPYRCHAL_BANDWIDTH_MBPS,
    Link,
    Node,
    Topology,
    application_overlay,
    attach_clients,
    element_record,
    flat_random,
    pure_random,
    random_tree,
    to_micpice_nodes_links,
    to_qos_links,
    transit_stub,
    tree,
    waxman,
)

__all__ = [
    "DEFAULT_TS_COSTS",
    "DISTRIBUTION_METHODS",
    "DISTRIBUTION_ORDERS",
    "MAX_FLOW_SIZE",
    "NAMED_TOPOLOGIES",
    "OPYRCHAL_BANDWIDTH_MBPS",
    "Event",
    "ExactNotProven",
    "ExactTooLarge",
    "Generation",
    "Instance",
    "InstanceError",
    "Link",
    "LinkDelayTable",
    "Node",
    "Plan",
    "PlanCheck",
    "TidOverlay",
    "Topology",
    "Transmission",
    "application_overlay",
    "attach_clients",
    "check_plan",
    "chen_events",
    "chen_flat_12",
    "chen_flat_100",
    "chen_instance",
    "chen_transit_stub_100",
    "commodity_count",
    "element_record",
    "flat_random",
    "generate_topology",
    "infeasible_plan",
    "opyrchal_fig5",
    "plan_distribution",
    "plan_enhanced",
    "plan_exact",
    "plan_greedy",
    "pure_random",
    "random_tree",
    "reliability_tree",
    "to_micpice_nodes_links",
    "to_qos_links",
    "transit_stub",
    "tree",
    "waxman",
]
