"""An independent policy check over the routes job's output: no planned transmission crosses a
link whose policy forbids its event.

The routes job (docs/reference/distribution.md) reads the overlay from the compacted topology
topic, where a link's ``forbidden_events`` (``schemas/topology_element.avsc``) lists event ids and
publisher ids that may not cross it, and writes ``RoutePlan`` records whose ``transmissions`` say
which event is sent over which link. Its event ids are ``"<publisher>|<filter>"``, so a listed
publisher forbids every event of that publisher. This module re-reads both from the records alone:
it replays the topology records as the compacted table they are (the latest record of an element
id wins, a tombstone removes it) and looks every transmission up in the resulting policy. It shares
no code with the planner's path (``routing.monitors.routes`` turns ``forbidden_events`` into the
MICPICE instance's 𝒫((u, v), e) = 0 entries, Chen et al. 2004, Eq. 3 and 7; the planners then
avoid them), so a slip anywhere on that path shows here.

Invariant checked: for every plan record and every transmission (u, v, e) in it, neither e nor
e's publisher is in the ``forbidden_events`` of link u->v. A transmission over a link the topology
does not list (the cost-0 link the planner adds from a subscription's broker to its subscriber) has
no policy and passes; whether links exist is :func:`routing.planning.check.check_plan`'s to judge.

>>> topology = [("b1->b2", {"kind": "link", "from": "b1", "to": "b2", "forbidden_events": ["p9"]}),
...             ("b2->b3", {"kind": "link", "from": "b2", "to": "b3", "forbidden_events": ["p1|x > 1"]})]
>>> plan = {"version": 1, "transmissions": [{"from": "b1", "to": "b2", "event": "p1|x > 1"},
...                                         {"from": "b2", "to": "b3", "event": "p1|x > 1"}]}
>>> check_policy(topology, [plan]).violations
('plan v1 sends p1|x > 1 over b2->b3, whose policy forbids p1|x > 1',)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PolicyCheck", "check_policy", "link_policies"]


@dataclass(frozen=True)
class PolicyCheck:
    """The verdict of :func:`check_policy`.

    Attributes
    ----------
    ok : bool
        True when ``violations`` is empty.
    violations : tuple of str
        One sentence per forbidden transmission, naming the plan version, event, link and the
        listed entries (the event id, its publisher or both) that forbid it.
    plans : int
        Plan records checked.
    transmissions : int
        Transmissions checked, over all plans.
    constrained : int
        Transmissions over a link with a non-empty policy (how much the check had to look at).
    """

    ok: bool
    violations: tuple[str, ...]
    plans: int
    transmissions: int
    constrained: int


def link_policies(
    topology: Iterable[tuple[str, Mapping[str, Any] | None]],
) -> dict[tuple[str, str], frozenset[str]]:
    """The forbidden entries of every link, from topology records ``(element id, record or None)``
    in topic order: the latest record of an id replaces the earlier one, a tombstone (None) or a
    record of another kind removes it.

    >>> link_policies([("a->b", {"kind": "link", "from": "a", "to": "b", "forbidden_events": ["e"]}),
    ...                ("a->b", None)])
    {}
    """
    links: dict[str, tuple[tuple[str, str], frozenset[str]]] = {}
    for element_id, record in topology:
        links.pop(element_id, None)
        if record is None or record.get("kind") != "link":
            continue
        src, dst = record.get("from"), record.get("to")
        if src and dst:
            links[element_id] = ((str(src), str(dst)), frozenset(str(e) for e in record.get("forbidden_events") or ()))
    out: dict[tuple[str, str], frozenset[str]] = {}
    for edge, forbidden in links.values():  # two element ids naming one (from, to): both policies hold
        out[edge] = out.get(edge, frozenset()) | forbidden
    return out


def check_policy(
    topology: Iterable[tuple[str, Mapping[str, Any] | None]], plans: Iterable[Mapping[str, Any]]
) -> PolicyCheck:
    """Check every transmission of every ``RoutePlan`` record in ``plans`` against the link
    policies of ``topology`` (:func:`link_policies`); see the module docstring for the rule.

    >>> check_policy([], [{"version": 3, "transmissions": [{"from": "a", "to": "b", "event": "p|f"}]}]).ok
    True
    """
    policies = link_policies(topology)
    violations: list[str] = []
    n_plans = n_sent = n_constrained = 0
    for record in plans:
        n_plans += 1
        for sent in record.get("transmissions") or ():
            n_sent += 1
            edge = (str(sent["from"]), str(sent["to"]))
            forbidden = policies.get(edge)
            if not forbidden:
                continue
            n_constrained += 1
            event = str(sent["event"])
            publisher = event.split("|", 1)[0]
            hits = sorted({event, publisher} & forbidden)
            if hits:
                where = f"{edge[0]}->{edge[1]}"
                violations.append(
                    f"plan v{record.get('version')} sends {event} over {where}, whose policy forbids {', '.join(hits)}"
                )
    return PolicyCheck(not violations, tuple(violations), n_plans, n_sent, n_constrained)
