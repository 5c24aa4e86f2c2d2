"""``siftstream plan``: the offline planning commands and their parser (docs/reference/commands.md).

One subcommand per offline planner, each reading a JSON instance and writing the contract's JSON
output: ``distribution`` (docs/reference/distribution.md), ``placement``
(docs/reference/placement.md), ``channels`` and ``groups`` (docs/reference/channels.md),
``instance`` (a random distribution instance) and ``check`` (verify a distribution plan).
``streaming.cli`` adds :func:`add_plan_parsers` to its parser; every command returns the exit code.

Example: ``siftstream plan distribution --instance inst.json --method exact``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["add_plan_parsers"]


def _plan_instance_doc(args: argparse.Namespace, command: str) -> Any:
    """The JSON document named by ``--instance`` of ``plan COMMAND``."""
    if not args.instance:
        page = "placement" if command == "placement" else "distribution"
        raise ValueError(f"plan {command} needs --instance FILE (docs/reference/{page}.md)")
    return json.loads(Path(args.instance).read_text())


def _plan_method(args: argparse.Namespace, command: str, methods: Sequence[str], default: str) -> str:
    """``--method`` of ``plan COMMAND``, checked here so that a bad one is reported like any other bad input."""
    method: str = args.method or default
    if method not in methods:
        raise ValueError(f"plan {command}: --method must be one of {', '.join(methods)} (got {method})")
    return method


def cmd_plan_distribution(args: argparse.Namespace) -> int:
    """Min-cost routes for a distribution instance (docs/reference/distribution.md)."""
    from routing.planning import DISTRIBUTION_METHODS, Instance, plan_distribution

    doc = _plan_instance_doc(args, "distribution")
    method = _plan_method(args, "distribution", DISTRIBUTION_METHODS, "enhanced")
    planned = plan_distribution(Instance.from_json(doc), method, order=args.order, seed=args.seed)
    print(json.dumps(planned.to_json(), indent=2))
    return 0


def cmd_plan_placement(args: argparse.Namespace) -> int:
    """Where to detect a composite subscription's operators (docs/reference/placement.md)."""
    from routing.composite import PLACEMENT_METHODS, plan_placement

    doc = _plan_instance_doc(args, "placement")
    method = _plan_method(args, "placement", PLACEMENT_METHODS, "optimal")
    print(json.dumps(plan_placement(doc, method), indent=2))
    return 0


def cmd_plan_channels(args: argparse.Namespace) -> int:
    """At most K delivery channels for a subscription set and an event sample (docs/reference/channels.md).

    Exit 2 for an invalid instance or option, 3 when ``exact`` is beyond its limit.
    """
    from routing.channels import CHANNEL_METHODS, DEFAULT_METHOD, ChannelInstance, ExactLimitError, plan_channels

    if not args.instance:
        raise ValueError("plan channels needs --instance FILE (docs/reference/channels.md)")
    method = _plan_method(args, "channels", CHANNEL_METHODS, DEFAULT_METHOD)
    doc = json.loads(Path(args.instance).read_text())
    instance = ChannelInstance.from_json(doc, k=args.k, psi=args.psi, seed=args.seed)
    try:
        out = plan_channels(instance, method, sigma=args.sigma, budget_ms=args.budget_ms)
    except ExactLimitError as exc:
        print(f"siftstream: error: {exc}", file=sys.stderr)
        return 3
    if out["summary"]["matched_events"] == 0:
        print(
            "siftstream: warning: no subscription matches any event of the sample; every plan has 0 deliveries",
            file=sys.stderr,
        )
    print(json.dumps(out, indent=2))
    return 0


def cmd_plan_instance(args: argparse.Namespace) -> int:
    """A random distribution instance as in Chen et al. 4.2 (docs/reference/distribution.md)."""
    from routing.planning import chen_instance, generate_topology

    topo = generate_topology(args.topology, seed=args.seed) if args.topology else None
    inst = chen_instance(
        topo,
        composites=args.composites,
        alpha=args.alpha,
        p_pop=args.p_pop,
        p_unp=args.p_unp,
        p_c=args.p_c,
        seed=args.seed,
    )
    print(json.dumps(inst.to_json(), indent=2))
    return 0


def cmd_plan_groups(args: argparse.Namespace) -> int:
    """Group counts of the multicast schemes, or CGM's endpoints for a budget (docs/reference/channels.md)."""
    from routing.channels.groups import cgm_max_endpoints, group_counts

    if args.budget is not None:
        if args.threshold is not None or args.neighbors is not None:
            raise ValueError("plan groups: --threshold and --neighbors go with --endpoints, not --budget")
        out = {
            "clusters": args.clusters,
            "budget": args.budget,
            "cgm_max_endpoints": cgm_max_endpoints(args.budget, args.clusters),
        }
    else:
        out = group_counts(args.endpoints, args.clusters, threshold=args.threshold, neighbors=args.neighbors)
    print(json.dumps(out, indent=2))
    return 0


def cmd_plan_check(args: argparse.Namespace) -> int:
    """Verify a distribution plan against its instance; exit 1 when it is invalid (docs/reference/distribution.md)."""
    from routing.planning import Instance, Plan, check_plan

    inst = Instance.from_json(_plan_instance_doc(args, "check"))
    if not args.plan:
        raise ValueError("plan check needs --plan FILE (a docs/reference/distribution.md plan)")
    verdict = check_plan(inst, Plan.from_json(json.loads(Path(args.plan).read_text())))
    print(json.dumps({"ok": verdict.ok, "cost": verdict.cost, "problems": list(verdict.problems)}, indent=2))
    return 0 if verdict.ok else 1


def add_plan_parsers(sub: Any) -> None:
    """``siftstream plan``: one subcommand per offline planner, each with its own options and docs page."""
    from routing.composite import PLACEMENT_METHODS
    from routing.planning import DISTRIBUTION_METHODS, DISTRIBUTION_ORDERS

    p = sub.add_parser(
        "plan",
        help="offline planning: distribution routes, composite placement, random instances, plan checks",
        description="Offline planning. distribution: min-cost routes under policy constraints "
        "(docs/reference/distribution.md); placement: where to detect a composite subscription "
        "(docs/reference/placement.md); instance: a random distribution instance; check: verify a distribution "
        "plan; channels: group subscriptions into at most K delivery channels; groups: the multicast groups "
        "each delivery scheme needs (docs/reference/channels.md).",
    )
    plan = p.add_subparsers(dest="action", required=True)

    q = plan.add_parser(
        "distribution",
        help="min-cost routes under policy constraints",
        description="Which events cross which links, and where composite events are generated, so that every "
        "subscriber gets its events, no link carries a forbidden event, and the cost is least (Chen et al. 2004). "
        "Prints the plan. Reference: docs/reference/distribution.md",
    )
    q.add_argument("--instance", metavar="FILE", help="the distribution instance (JSON); required")
    q.add_argument(
        "--method",
        metavar="{" + ",".join(DISTRIBUTION_METHODS) + "}",
        help="greedy or enhanced: the heuristics of Chen et al. 3.3; exact: a proven optimum, for small "
        "instances (default: enhanced)",
    )
    q.add_argument(
        "--order",
        choices=DISTRIBUTION_ORDERS,
        default="min-cost",
        help="enhanced: the order subscribers are served in (default: %(default)s)",
    )
    q.add_argument("--seed", type=int, default=0, help="enhanced, --order random: the seed (default: %(default)s)")
    q.set_defaults(func=cmd_plan_distribution)

    q = plan.add_parser(
        "placement",
        help="where to detect a composite subscription",
        description="The broker at which each operator of one composite subscription is detected, given where "
        "its leaves' publications enter the overlay and at what rates (Li & Jacobsen 4). Prints the placement, "
        "its traffic cost, the joint-point baseline and one reason per operator. "
        "Reference: docs/reference/placement.md",
    )
    q.add_argument("--instance", metavar="FILE", help="the placement instance (JSON); required")
    q.add_argument(
        "--method",
        metavar="{" + ",".join(PLACEMENT_METHODS) + "}",
        help="optimal: least traffic cost; adaptive: Li & Jacobsen Algorithm 2; joint-point: the topology-only "
        "baseline (default: optimal)",
    )
    q.set_defaults(func=cmd_plan_placement)

    q = plan.add_parser(
        "channels",
        help="group subscriptions into at most K delivery channels with few false positives",
        description="Groups the subscriptions of one instance (filters and an event sample) into at most K "
        "delivery channels so that subscribers receive few events they did not ask for (Tariq ch. 3, "
        "Opyrchal et al. 2.6). Prints the plan, what each channel carries and its exact false positives. "
        "Exit 2 for an invalid instance or option, 3 when exact is beyond its limit. "
        "Reference: docs/reference/channels.md",
    )
    q.add_argument("--instance", metavar="FILE", help="the channel instance (JSON); required")
    q.add_argument(
        "--method",
        metavar="M",
        help="flooding, ideal, exact, ck, ov, kmeans, spectral-rassoc, spectral-ncut, approx or auto "
        "(default: spectral-ncut)",
    )
    q.add_argument("--k", type=int, help="K, the most channels a plan may use (overrides the instance's k)")
    q.add_argument("--seed", type=int, help="the k-means seed (overrides the instance's seed; default 0)")
    q.add_argument("--psi", type=int, help="the recent-event window (overrides the instance's psi; default 20)")
    q.add_argument("--sigma", type=float, help="spectral-ncut and ov: the kernel exp(-(1 - J) / sigma^2)")
    q.add_argument("--budget-ms", type=float, default=2000.0, help="auto: the time budget in ms (default: %(default)s)")
    q.set_defaults(func=cmd_plan_channels)

    q = plan.add_parser(
        "instance",
        help="a random distribution instance as in Chen et al. 4.2",
        description="Prints a random distribution instance drawn as in Chen et al. 4.2: one primitive event "
        "per publisher, composite events in three levels, popular and unpopular events, policy constraints. "
        "Reference: docs/reference/distribution.md",
    )
    q.add_argument("--topology", help="a named topology or generator (default: chen-flat-12 drawn from --seed)")
    q.add_argument("--composites", type=int, default=2, help="number of composite events (default: %(default)s)")
    q.add_argument("--alpha", type=float, default=0.2, help="probability an event is popular (default: %(default)s)")
    q.add_argument("--p-pop", type=float, default=0.6, help="interest in a popular event (default: %(default)s)")
    q.add_argument("--p-unp", type=float, default=0.1, help="interest in an unpopular event (default: %(default)s)")
    q.add_argument(
        "--p-c", type=float, default=0.0, help="probability a (link, event) is forbidden (default: %(default)s)"
    )
    q.add_argument("--seed", type=int, default=0, help="the random draw (default: %(default)s)")
    q.set_defaults(func=cmd_plan_instance)

    q = plan.add_parser(
        "check",
        help="verify a distribution plan (exit 1 if invalid)",
        description="Checks a distribution plan against its instance with code that shares nothing with the "
        "planners; prints the verdict, the recomputed cost and the problems, and exits 1 when the plan is "
        "invalid. Reference: docs/reference/distribution.md",
    )
    q.add_argument("--instance", metavar="FILE", help="the distribution instance (JSON); required")
    q.add_argument("--plan", metavar="FILE", help="the plan to verify (JSON, as plan distribution prints it); required")
    q.set_defaults(func=cmd_plan_check)

    q = plan.add_parser(
        "groups",
        help="multicast groups each delivery scheme needs (Opyrchal et al.)",
        description="Group counts of ideal, flooding, CGM, TCGM and neighbor matching for N endpoints in C "
        "clusters (Opyrchal et al. 2000, Figs. 1, 2 and 4), as exact integers; with --budget, the most endpoints "
        "CGM supports. Reference: docs/reference/channels.md",
    )
    q.add_argument("--clusters", type=int, required=True, help="C, the number of clusters")
    size = q.add_mutually_exclusive_group(required=True)
    size.add_argument("--endpoints", type=int, help="N, the number of endpoints (a multiple of C)")
    size.add_argument("--budget", type=int, help="G groups: print the most endpoints CGM supports")
    q.add_argument("--threshold", type=int, help="with --endpoints: the TCGM threshold T, 1..N/C-1")
    q.add_argument("--neighbors", type=int, help="with --endpoints: k neighbours per endpoint")
    q.set_defaults(func=cmd_plan_groups)
