"""TID routing on cyclic broker overlays (routing.planning.loop_free; Li and Jacobsen §3.1-3.2).

Oracles are brute force: advertisement trees against Dijkstra, PRTs against a walk of the SRTs,
deliveries against the subscriptions whose filters match (and overlap a matching advertisement of
the publisher), all recomputed from plain dicts of what was advertised and subscribed.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from routing.matching.language import Filter, overlaps
from routing.matching.language import parse_filter as _parse
from routing.planning.loop_free import Client, Delivery, Hop, LastHop, LinkDelayTable, TidOverlay, Trace
from tests.strategies import TID_DELAYS, TidScenario, cyclic_broker_graphs, tid_events, tid_filters, tid_scenarios

Model = dict[str, tuple[str, str, str]]  # id -> (client, broker, filter text)


# --- brute-force oracles -----------------------------------------------------------------------


@cache
def parse_filter(text: str) -> Filter:
    return _parse(text)


def matching_subscribers(advs: Model, subs: Model, publisher: str, event: Mapping[str, object]) -> frozenset[str]:
    """Subscribers with a subscription that matches ``event`` and overlaps an advertisement of
    ``publisher`` that matches ``event``."""
    ads = [parse_filter(f) for p, _, f in advs.values() if p == publisher and parse_filter(f).matches(event)]
    return frozenset(
        s
        for s, _, f in subs.values()
        if parse_filter(f).matches(event) and any(overlaps(parse_filter(f), a) for a in ads)
    )


def expected_prts(net: TidOverlay, advs: Model, subs: Model) -> dict[str, dict[str, set[tuple[str, LastHop]]]]:
    """Every subscription's copy for every overlapping advertisement, walked up the SRT last hops
    from the subscriber's broker to the advertiser's, recording where it came from."""
    prts: dict[str, dict[str, set[tuple[str, LastHop]]]] = {b: {} for b in net.brokers}
    for sub_id, (subscriber, broker, text) in subs.items():
        for tid, (_, _, adv_text) in advs.items():
            if not overlaps(parse_filter(text), parse_filter(adv_text)):
                continue
            here: str = broker
            came_from: LastHop = Client(subscriber)
            while True:
                prts[here].setdefault(sub_id, set()).add((tid, came_from))
                up = net.srt(here)[tid]
                if isinstance(up, Client):
                    break
                here, came_from = up, here
    return prts


def actual_prts(net: TidOverlay) -> dict[str, dict[str, set[tuple[str, LastHop]]]]:
    return {b: {s: set(pairs) for s, pairs in net.prt(b).items()} for b in net.brokers}


def dijkstra(
    brokers: Iterable[str], links: Iterable[tuple[str, str]], delay: Mapping[frozenset[str], float], root: str
) -> tuple[dict[str, float], dict[str, list[str]]]:
    adj: dict[str, list[str]] = {b: [] for b in brokers}
    for u, v in links:
        adj[u].append(v)
        adj[v].append(u)
    dist = {root: 0.0}
    heap = [(0.0, root)]
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        for v in adj[u]:
            nd = d + delay[frozenset((u, v))]
            if nd < dist.get(v, float("inf")):
                dist[v] = nd
                heapq.heappush(heap, (nd, v))
    return dist, adj


def check_publication(net: TidOverlay, advs: Model, subs: Model, publisher: str, event: dict[str, object]) -> None:
    """Lemma 1 and Lemma 2 for both modes, and delivery equal to the oracle."""
    expected = matching_subscribers(advs, subs, publisher, event)
    plain = net.publish(publisher, event)
    selected = net.publish(publisher, event, select_paths=True)
    for d in (plain, selected):
        assert d.duplicates == 0  # Lemma 1: no broker gets it twice
        assert len({h.receiver for h in d.hops}) == len(d.hops)
        assert d.ingress not in {h.receiver for h in d.hops}
        assert all(n == 1 for n in d.deliveries.values())  # ... nor any subscriber
        assert d.subscribers == expected
        assert (d.tid is not None) == any(
            p == publisher and parse_filter(f).matches(event) for p, _, f in advs.values()
        )
    assert selected.subscribers == plain.subscribers  # Lemma 2
    # the shipped rule: one TID for the whole publication, chosen at the publisher's broker
    assert {t for h in selected.hops for t in h.tids} <= {chosen_tid(net, subs, selected, event)}


def chosen_tid(net: TidOverlay, subs: Model, d: Delivery, event: Mapping[str, object]) -> str | None:
    """The shipped rule, recomputed: among the TIDs that every matching subscription of a remote
    subscriber holds at the publisher's broker, the least total Link Delay Table delay to their
    last hops; ties keep the publication's own TID, then the smallest."""
    if d.tid is None or d.ingress is None:
        return None
    delays = net.link_delays(d.ingress)
    remote = [
        dict(pairs)
        for s, pairs in net.prt(d.ingress).items()
        if parse_filter(subs[s][2]).matches(event) and subs[s][1] != d.ingress
    ]
    if not remote:
        return d.tid
    common = set.intersection(*(set(p) for p in remote))
    cost = {b: math.fsum(delays.get(str(p[b])) for p in remote) for b in common}
    return min(common, key=lambda b: (cost[b], b != d.tid, b))


# --- replaying a generated script ----------------------------------------------------------------


class Replay:
    def __init__(self, sc: TidScenario, *, delays: bool = True) -> None:
        self.sc = sc
        self.net = TidOverlay(sc.brokers, sc.links, delays=sc.delays)
        self.delay = {frozenset(k): v for k, v in sc.delays.items()}
        self.advs: Model = {}
        self.subs: Model = {}
        self.traces: list[tuple[tuple[Any, ...], Trace, dict[frozenset[str], float], Model]] = []
        for op in sc.ops:
            if op[0] == "delay":
                if delays:
                    self.net.set_delay(op[1], op[2], op[3])
                    self.delay[frozenset(op[1:3])] = op[3]
                continue
            if op[0] == "observe":
                self.net.observe(op[1], op[2], op[3])
                continue
            if op[0] == "advertise":
                trace = self.net.advertise(op[1], op[2], sc.publishers[op[2]], op[3])
                self.advs[op[1]] = (op[2], sc.publishers[op[2]], op[3])
            elif op[0] == "subscribe":
                trace = self.net.subscribe(op[1], op[2], sc.subscribers[op[2]], op[3])
                self.subs[op[1]] = (op[2], sc.subscribers[op[2]], op[3])
            else:
                trace = self.net.unsubscribe(op[1])
                del self.subs[op[1]]
            self.traces.append((op, trace, dict(self.delay), dict(self.advs)))


# --- properties ----------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(tid_scenarios())
def test_tables_deliveries_lemma1_lemma2_and_oracle(sc: TidScenario) -> None:
    r = Replay(sc)
    assert actual_prts(r.net) == expected_prts(r.net, r.advs, r.subs)
    gone = {op[1] for op in sc.ops if op[0] == "unsubscribe"}
    assert not any(s in gone for b in sc.brokers for s in r.net.prt(b))
    assert set(r.net.duplicate_count) <= {"advertisement"}  # only advertisements are duplicated
    for publisher, event in sc.publications:
        check_publication(r.net, r.advs, r.subs, publisher, event)


@settings(max_examples=100, deadline=None)
@given(tid_scenarios(unsubscribe=False, max_publications=1))
def test_advertisement_trees_and_subscription_messages(sc: TidScenario) -> None:
    r = Replay(sc)
    for op, trace, delay, advs in r.traces:
        if op[0] == "advertise":
            check_flood(sc, r.net, op[1], op[2], trace, delay)
        else:
            check_subscription_messages(sc, r.net, op, trace, advs)


def check_flood(
    sc: TidScenario, net: TidOverlay, tid: str, publisher: str, trace: Trace, delay: Mapping[frozenset[str], float]
) -> None:
    """The advertisement tree is the shortest-delay tree (Dijkstra), ties to the smallest sender,
    and the flood's duplicates are exactly the copies over the links outside the tree."""
    n, m = len(sc.brokers), len(sc.links)
    root = sc.publishers[publisher]
    dist, adj = dijkstra(sc.brokers, sc.links, delay, root)
    assert net.srt(root)[tid] == Client(publisher)
    for v in sc.brokers:
        if v != root:
            fastest = [u for u in adj[v] if dist[u] + delay[frozenset((u, v))] == dist[v]]
            assert net.srt(v)[tid] == min(fastest)
    flood = [h for h in trace.hops if h.kind == "advertisement"]
    # every broker forwards once, to all neighbours but the one it heard from; every copy
    # beyond the first at a broker is a duplicate: twice the number of independent cycles
    assert len(flood) == 2 * m - (n - 1)
    assert trace.duplicates == 2 * (m - n + 1)
    assert all(h.tids == {tid} for h in flood)


def check_subscription_messages(
    sc: TidScenario, net: TidOverlay, op: tuple[Any, ...], trace: Trace, advs: Model
) -> None:
    """A subscription's copies walk up the SRT last hops of each overlapping advertisement, each
    TID over each link at most once, one message per next hop carrying all its TIDs."""
    assert trace.duplicates == 0
    edge = sc.subscribers[op[2]]
    crossings = [(h.sender, h.receiver, t) for h in trace.hops for t in h.tids]
    assert len(crossings) == len(set(crossings))
    walked = set()
    for tid, (_, _, text) in advs.items():
        if overlaps(parse_filter(op[3]), parse_filter(text)):
            here = edge
            while not isinstance(up := net.srt(here)[tid], Client):
                walked.add((here, up, tid))
                here = up
    assert set(crossings) == walked
    first = [h for h in trace.hops if h.sender == edge]
    by_hop: dict[str, set[str]] = {}
    for sender, receiver, tid in walked:
        if sender == edge:
            by_hop.setdefault(receiver, set()).add(tid)
    assert {h.receiver: set(h.tids) for h in first} == by_hop
    assert len(first) == len(by_hop)


@settings(max_examples=60, deadline=None)
@given(tid_scenarios())
def test_fixed_delays_give_one_last_hop_per_subscription(sc: TidScenario) -> None:
    """With fixed link delays, all of a subscription's TID paths through a broker leave it over
    the same link: there is nothing for path selection to choose (module docstring)."""
    r = Replay(sc, delays=False)
    for b in sc.brokers:
        for pairs in r.net.prt(b).values():
            assert len({hop for _, hop in pairs}) == 1
    for publisher, event in sc.publications:
        assert r.net.publish(publisher, event, select_paths=True).hops == r.net.publish(publisher, event).hops


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(TID_DELAYS), min_size=1, max_size=20), st.sampled_from([0.125, 0.5, 1.0]))
def test_link_delay_table_is_an_ewma(xs: list[float], alpha: float) -> None:
    table = LinkDelayTable(alpha)
    for x in xs:
        table.update("n", x)
    # closed form: (1 - alpha)^(k-1) x_1 + sum_{i >= 2} alpha (1 - alpha)^(k-i) x_i
    k = len(xs)
    weights = alpha * (1.0 - alpha) ** np.arange(k - 1, -1, -1)
    weights[0] = (1.0 - alpha) ** (k - 1)
    assert table.get("n") == pytest.approx(float(weights @ np.array(xs)))
    assert table.get("other") == float("inf")


# --- stateful: interleaved advertise / subscribe / unsubscribe / publish against plain dicts ---


class TidOverlayMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.advs: Model = {}
        self.subs: Model = {}
        self.count = 0

    @initialize(
        graph=cyclic_broker_graphs(max_brokers=8),
        data=st.data(),
    )
    def build(self, graph: tuple[tuple[str, ...], tuple[tuple[str, str], ...]], data: st.DataObject) -> None:
        brokers, self.links = graph
        self.net = TidOverlay(brokers, self.links)
        self.publishers = {f"P{i}": data.draw(st.sampled_from(brokers)) for i in range(3)}
        self.subscribers = {f"S{i}": data.draw(st.sampled_from(brokers)) for i in range(4)}

    def _next(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    @rule(publisher=st.sampled_from(["P0", "P1", "P2"]), text=tid_filters())
    def advertise(self, publisher: str, text: str) -> None:
        adv_id = self._next("a")
        self.net.advertise(adv_id, publisher, self.publishers[publisher], text)
        self.advs[adv_id] = (publisher, self.publishers[publisher], text)

    @rule(subscriber=st.sampled_from(["S0", "S1", "S2", "S3"]), text=tid_filters())
    def subscribe(self, subscriber: str, text: str) -> None:
        sub_id = self._next("s")
        trace = self.net.subscribe(sub_id, subscriber, self.subscribers[subscriber], text)
        assert trace.duplicates == 0
        self.subs[sub_id] = (subscriber, self.subscribers[subscriber], text)

    @precondition(lambda self: bool(self.subs))
    @rule(i=st.integers(0, 50))
    def unsubscribe(self, i: int) -> None:
        sub_id = sorted(self.subs)[i % len(self.subs)]
        trace = self.net.unsubscribe(sub_id)
        assert trace.duplicates == 0
        del self.subs[sub_id]

    @rule(i=st.integers(0, 50), delay=st.sampled_from(TID_DELAYS))
    def change_delay(self, i: int, delay: float) -> None:
        u, v = self.links[i % len(self.links)]
        self.net.set_delay(u, v, delay)

    @rule(publisher=st.sampled_from(["P0", "P1", "P2"]), event=tid_events())
    def publish(self, publisher: str, event: dict[str, object]) -> None:
        check_publication(self.net, self.advs, self.subs, publisher, event)

    @invariant()
    def tables_match_the_model(self) -> None:
        if not hasattr(self, "net"):
            return
        assert actual_prts(self.net) == expected_prts(self.net, self.advs, self.subs)
        assert set(self.net.subscriptions) == set(self.subs)
        assert set(self.net.duplicate_count) <= {"advertisement"}


TidOverlayMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
test_tid_overlay_stateful = TidOverlayMachine.TestCase


# --- the paper's Fig. 1: without TIDs a subscription loops -------------------------------------


def naive_subscription_messages(net: TidOverlay, broker: str, text: str, cap: int) -> list[tuple[str, str]]:
    """PADRES routing without TIDs (§3, Fig. 1): a broker forwards a subscription to the SRT last
    hop of every advertisement it overlaps, except back where it came from; no duplicate check.
    Returns the messages sent, stopping after ``cap``."""
    f = parse_filter(text)
    queue: list[tuple[str, str | None]] = [(broker, None)]
    sent: list[tuple[str, str]] = []
    while queue and len(sent) < cap:
        here, came_from = queue.pop(0)
        srt = net.srt(here)
        hops = sorted(
            {
                h
                for t, h in srt.items()
                if isinstance(h, str) and h != came_from and overlaps(f, net.advertisements[t].filter)
            }
        )
        for h in hops:
            sent.append((here, h))
            queue.append((h, here))
    return sent


def ring() -> TidOverlay:
    """Brokers 1..6 in a ring; Adv1 from broker 5, Adv2 from broker 2 (unit delays)."""
    net = TidOverlay(
        [str(i) for i in range(1, 7)], [("1", "2"), ("2", "3"), ("3", "4"), ("4", "5"), ("5", "6"), ("6", "1")]
    )
    net.advertise("adv1", "P1", "5", "price < 100")
    net.advertise("adv2", "P2", "2", "price > 10")
    return net


def test_fig1_without_tids_a_subscription_loops() -> None:
    net = ring()
    # Adv1 reached broker 1 over 6, Adv2 reached broker 6 over 1: the trees cross.
    assert net.srt("1") == {"adv1": "6", "adv2": "2"}
    assert net.srt("6") == {"adv1": "5", "adv2": "1"}
    sent = naive_subscription_messages(net, "1", "price between 20 and 50", cap=60)
    assert len(sent) == 60  # never stops
    # 1 -> 6 -> 5 -> 4 -> 3 -> 2 -> 1: the copy bound for Adv1 comes back round on Adv2's tree
    assert sent[:7] == [("1", "2"), ("1", "6"), ("6", "5"), ("5", "4"), ("4", "3"), ("3", "2"), ("2", "1")]


def test_fig2_with_tids_the_subscription_stops() -> None:
    net = ring()
    trace = net.subscribe("sub1", "X", "1", "price between 20 and 50")
    assert trace == Trace(
        (
            Hop("subscription", "1", "2", frozenset({"adv2"})),
            Hop("subscription", "1", "6", frozenset({"adv1"})),
            Hop("subscription", "6", "5", frozenset({"adv1"})),
        ),
        0,
    )
    assert net.prt("1") == {"sub1": frozenset({("adv1", Client("X")), ("adv2", Client("X"))})}
    assert net.prt("6") == {"sub1": frozenset({("adv1", "1")})}
    assert net.prt("3") == {} and net.prt("4") == {}
    d = net.publish("P1", {"price": 30})
    assert [(h.sender, h.receiver) for h in d.hops] == [("5", "6"), ("6", "1")]
    assert dict(d.deliveries) == {"X": 1}
    assert net.unsubscribe("sub1").hops == tuple(h._replace(kind="unsubscription") for h in trace.hops)
    assert all(net.prt(b) == {} for b in map(str, range(1, 7)))


def test_duplicates_are_advertisements_only() -> None:
    net = ring()  # 6 brokers, 6 links: one cycle, so each flood has 2 duplicate copies
    assert net.duplicate_count == Counter({"advertisement": 4})
    net.subscribe("sub1", "X", "1", "price between 20 and 50")
    net.publish("P1", {"price": 30}, select_paths=True)
    assert net.duplicate_count == Counter({"advertisement": 4})
    assert net.message_count == Counter({"advertisement": 14, "subscription": 3, "publication": 2})


# --- the gap in §3.2: Algorithm 1 as written ---------------------------------------------------


def seven_brokers() -> TidOverlay:
    """X is P's broker, R is Q's. Tree t (P's) is built while X-H2 is slow, so subscribers at A1
    and A2 hang under H3 and H1; tree b (Q's) after the delays changed, so both hang under H2."""
    links = [("X", "H1"), ("X", "H2"), ("X", "H3"), ("X", "R"), ("H2", "A1"), ("H2", "A2"), ("H3", "A1"), ("H1", "A2")]
    net = TidOverlay(["X", "H1", "H2", "H3", "A1", "A2", "R"], links, delays={("X", "H2"): 5}, alpha=1.0)
    net.advertise("t", "P", "X", "x < 5")
    for u, v, d in [("X", "H2", 1), ("H3", "A1", 10), ("H1", "A2", 10)]:
        net.set_delay(u, v, d)
    net.advertise("b", "Q", "R", "x > 0")
    net.set_delay("X", "H3", 3)
    net.subscribe("s1", "S1", "A1", "x > 1")
    net.subscribe("s2", "S2", "A2", "x > 1")
    return net


@pytest.mark.parametrize("matching", ["current-tid", "any-tid"])
def test_paper_gap_algorithm1_duplicates(matching: Any) -> None:
    net = seven_brokers()
    assert net.prt("X") == {"s1": frozenset({("t", "H3"), ("b", "H2")}), "s2": frozenset({("t", "H1"), ("b", "H2")})}
    assert net.link_delays("X").as_dict() == {"R": 1.0, "H1": 1.0, "H2": 1.0, "H3": 3.0}
    d = net.publish("P", {"x": 2}, select_paths=True, algorithm1=matching)
    # s1 takes its faster b pair over H2; s2 keeps t over H1 (a tie keeps the TID). The b copy
    # at H2 serves s2 too (s2's b path runs through H2), so A2 receives the publication twice.
    # TIDs changed only at the publisher's broker, so switching there alone is not safe either.
    assert [(h.sender, h.receiver, set(h.tids)) for h in d.hops] == [
        ("X", "H1", {"t"}),
        ("X", "H2", {"b"}),
        ("H2", "A1", {"b"}),
        ("H2", "A2", {"b"}),
        ("H1", "A2", {"t"}),
    ]
    assert d.duplicates == 1
    # the shipped rule moves the whole publication to b: fewer messages, no duplicates
    shipped = net.publish("P", {"x": 2}, select_paths=True)
    assert [(h.sender, h.receiver, set(h.tids)) for h in shipped.hops] == [
        ("X", "H2", {"b"}),
        ("H2", "A1", {"b"}),
        ("H2", "A2", {"b"}),
    ]
    assert shipped.duplicates == 0 and shipped.subscribers == d.subscribers == {"S1", "S2"}
    plain = net.publish("P", {"x": 2})
    assert plain.messages == 4 and plain.duplicates == 0 and plain.subscribers == {"S1", "S2"}


def test_paper_gap_algorithm1_current_tid_loses_a_subscriber() -> None:
    net = TidOverlay(
        ["X", "H", "H'", "A", "R"],
        [("X", "H"), ("X", "H'"), ("H", "A"), ("H'", "A"), ("X", "R")],
        delays={("X", "H"): 1, ("X", "H'"): 2, ("H", "A"): 5, ("H'", "A"): 1, ("X", "R"): 1},
    )
    net.advertise("t", "P", "X", "x < 5")
    net.set_delay("H'", "A", 10)
    net.advertise("b", "Q", "R", "x > 3")
    net.subscribe("s0", "S0", "A", "x > 1")  # overlaps t and b
    net.subscribe("s1", "S1", "H", "x < 2")  # overlaps t only
    assert net.prt("X") == {"s0": frozenset({("t", "H'"), ("b", "H")}), "s1": frozenset({("t", "H")})}
    # s0 picks its faster b pair over H, s1 its t pair over H: one copy to H, with s0's TID b;
    # at H, s1 holds no b pair, so S1 never gets the publication.
    d = net.publish("P", {"x": 1.5}, select_paths=True, algorithm1="current-tid")
    assert d.subscribers == {"S0"} and d.duplicates == 0
    assert net.publish("P", {"x": 1.5}).subscribers == {"S0", "S1"}
    shipped = net.publish("P", {"x": 1.5}, select_paths=True)  # s1 holds no b pair: keeps t
    assert shipped.subscribers == {"S0", "S1"} and {t for h in shipped.hops for t in h.tids} == {"t"}


def test_paper_gap_algorithm1_any_tid_duplicates_with_fixed_delays() -> None:
    net = TidOverlay(["1", "2", "3"], [("1", "2"), ("2", "3"), ("1", "3")])
    net.advertise("a0", "P0", "1", "x exists")
    net.advertise("a1", "P1", "2", "x exists")
    net.subscribe("s0", "S0", "2", "sym = 'B'")
    net.subscribe("s1", "S1", "3", "x exists")
    # broker 2 gets the a0 copy for S0, but also holds s1's a1 path to 3, which it follows
    d = net.publish("P0", {"sym": "B", "x": 2}, select_paths=True, algorithm1="any-tid")
    assert [(h.sender, h.receiver, set(h.tids)) for h in d.hops] == [
        ("1", "2", {"a0"}),
        ("1", "3", {"a0"}),
        ("2", "3", {"a1"}),
    ]
    assert d.duplicates == 1
    assert net.publish("P0", {"sym": "B", "x": 2}, select_paths=True).duplicates == 0


# --- edges and errors ----------------------------------------------------------------------------


def test_a_publication_without_a_matching_advertisement_is_not_routed() -> None:
    net = ring()
    net.subscribe("sub1", "X", "1", "price > 0")
    d = net.publish("P1", {"price": 500})
    assert d == Delivery(None, reason=d.reason) and d.reason is not None and "no advertisement matching" in d.reason
    assert d.messages == 0 and d.subscribers == frozenset() and d.brokers == frozenset()
    assert "no advertisements" in (net.publish("nobody", {"price": 1}).reason or "")


def test_subscriptions_made_before_an_advertisement_are_pulled_along_its_tree() -> None:
    net = TidOverlay(["1", "2", "3"], [("1", "2"), ("2", "3"), ("1", "3")])
    assert net.subscribe("s", "S", "3", "price < 5") == Trace((), 0)
    trace = net.advertise("a", "P", "1", "price < 10")
    assert [h for h in trace.hops if h.kind == "subscription"] == [Hop("subscription", "3", "1", frozenset({"a"}))]
    assert net.publish("P", {"price": 1}).deliveries == {"S": 1}


def test_errors() -> None:
    with pytest.raises(ValueError, match="two different known brokers"):
        TidOverlay(["1"], [("1", "2")])
    net = ring()
    with pytest.raises(ValueError, match="already in use"):
        net.advertise("adv1", "P1", "5", "price < 1")
    with pytest.raises(ValueError, match="attached to broker '5'"):
        net.advertise("adv3", "P1", "4", "price < 1")
    with pytest.raises(ValueError, match="unknown broker"):
        net.subscribe("s", "S", "9", "price < 1")
    with pytest.raises(KeyError):
        net.unsubscribe("nope")
    with pytest.raises(ValueError, match="select_paths=True"):
        net.publish("P1", {"price": 1}, algorithm1="any-tid")
    with pytest.raises(ValueError, match="no link"):
        net.set_delay("1", "3", 2.0)
    with pytest.raises(ValueError, match="not a neighbour"):
        net.observe("1", "3", 2.0)
    with pytest.raises(ValueError, match="finite"):
        net.set_delay("1", "2", float("nan"))
