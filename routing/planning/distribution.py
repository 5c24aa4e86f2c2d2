"""Min-cost event distribution under policy constraints and composite events (MICPICE): one entry point.

Chen, Ge, Kurose and Towsley, *Optimizing event distribution in publish/subscribe systems in the
presence of policy-constraints and composite events* (2004), §2-§3; the contract of
``siftstream plan distribution`` is docs/reference/distribution.md. :func:`plan` runs one of the
planners of :data:`METHODS` on an :class:`~routing.planning.model.Instance`:

- ``greedy``: :func:`routing.planning.heuristics.plan_greedy` (§3.3.1, Figs. 4 and 5);
- ``enhanced``: :func:`routing.planning.heuristics.plan_enhanced` (§3.3.2) with one of the
  subscriber orders of :data:`routing.planning.heuristics.ORDERS`;
- ``exact``: :func:`routing.planning.exact.plan_exact`, a proven optimum (small instances).

The model itself (instances, plans, random instances) is :mod:`routing.planning.model`; the
independent checker of any plan is :func:`routing.planning.check.check_plan`. Every method
returns a feasible plan exactly when the instance has one, and then the exact cost is at most
each heuristic's.

>>> from routing.planning.model import Instance
>>> doc = {"nodes": [{"id": "p1", "role": "publisher"}, {"id": "b1", "role": "broker"},
...                  {"id": "s1", "role": "subscriber"}],
...        "links": [{"from": "p1", "to": "b1", "cost": 1.0}, {"from": "b1", "to": "s1", "cost": 2.0}],
...        "events": [{"id": "e1", "rate": 0.5, "publisher": "p1"}],
...        "interests": [{"subscriber": "s1", "event": "e1"}], "forbidden": []}
>>> [plan(Instance.from_json(doc), method).cost for method in METHODS]
[1.5, 1.5, 1.5]
"""

from __future__ import annotations

from routing.planning.exact import plan_exact
from routing.planning.heuristics import plan_enhanced, plan_greedy
from routing.planning.model import Instance, Plan

__all__ = ["METHODS", "plan"]

METHODS = ("greedy", "enhanced", "exact")
"""The planners :func:`plan` runs, by name (``siftstream plan distribution --method``)."""


def plan(instance: Instance, method: str = "enhanced", order: str = "min-cost", seed: int = 0) -> Plan:
    """Plan ``instance`` with ``method`` (``greedy``, ``enhanced`` or ``exact``): the one entry
    point of ``siftstream plan distribution`` and the routes job.

    ``order`` and ``seed`` are the enhanced heuristic's subscriber order and random seed; the
    other methods ignore them.

    >>> from routing.planning.model import chen_instance
    >>> plan(chen_instance(seed=4), "greedy").method
    'greedy'
    """
    if method == "greedy":
        return plan_greedy(instance)
    if method == "enhanced":
        return plan_enhanced(instance, order, seed)
    if method == "exact":
        return plan_exact(instance)
    raise ValueError(f"method must be one of {', '.join(METHODS)} (got {method!r})")
