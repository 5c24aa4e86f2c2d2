"""``siftstream plan channels`` without the command line: one instance in, the output document out.

Runs one method of docs/reference/channels.md §4 on a :class:`ChannelInstance`, recomputes
every number of the plan from scratch (:func:`~routing.channels.match_sets.plan_metrics`) and
builds the document of §5, keys in the contract's order. ``auto`` runs the bounded methods in
:data:`~routing.channels.methods.AUTO_RUN_ORDER` while the time budget lasts (:data:`AUTO_ALWAYS`,
flooding, the baselines and the default method, always) and keeps the fewest false positives, the
first in table order on a tie. From :data:`HOLDOUT_MIN_EVENTS` held-out events on, it fits every
candidate on the older events of the sample and keeps the fewest false positives on the newest
:data:`HOLDOUT_FRACTION` of it (:func:`holdout_split`): a choice made on the events a plan was
fitted to prefers the plan that fits them most, not the one that does best on the events that
follow.

Examples
--------
>>> doc = {"k": 2, "subscriptions": [
...     {"subscription_id": "s1", "subscriber_id": "u1", "filter": "price < 10"},
...     {"subscription_id": "s2", "subscriber_id": "u2", "filter": "price < 20"}],
...     "events": [{"event_id": "e1", "attributes": {"price": 5}}]}
>>> out = plan_channels(ChannelInstance.from_json(doc), "flooding")
>>> out["assignment"], out["summary"]["false_positives"]
({'s1': 0, 's2': 0}, 0)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse

from routing.channels.instance import ChannelError, ChannelInstance, Domain, ExactLimitError
from routing.channels.match_sets import derive_hits, false_positives, plan_metrics
from routing.channels.methods import (
    AUTO_BASELINES,
    AUTO_RUN_ORDER,
    BOUNDED_METHODS,
    CHANNEL_METHODS,
    approx,
    ck,
    exact,
    flooding,
    ideal,
    join_isolated,
    kmeans_on_rows,
    number_channels,
    ov,
    spectral_ncut,
    spectral_ncut_sparse,
    spectral_rassoc,
)
from routing.channels.similarity import csr_of, jaccard, recent_windows
from routing.matching.language import Filter

__all__ = [
    "AUTO_ALWAYS",
    "DEFAULT_BUDGET_MS",
    "DEFAULT_METHOD",
    "DENSE_SIMILARITY_LIMIT",
    "HOLDOUT_FRACTION",
    "HOLDOUT_MIN_EVENTS",
    "RECLUSTER_EIGEN_TOL",
    "RECLUSTER_METHODS",
    "RECLUSTER_RESTARTS",
    "SPARSE_NCUT_FROM",
    "AutoChoice",
    "AutoTimes",
    "PreparedInstance",
    "holdout_split",
    "plan_channels",
    "recluster",
    "run_method",
    "select_auto",
]

DEFAULT_METHOD = "spectral-ncut"
DEFAULT_BUDGET_MS = 2000

AUTO_ALWAYS = (*AUTO_BASELINES, DEFAULT_METHOD)
"""The candidates ``auto`` runs whatever its budget: flooding, the baselines it must not do worse
than, and the default method, so that auto never chooses without the plan the default would have
made (at 100,000 subscriptions a 2 s budget is spent before spectral-ncut starts, and a choice
between flooding and approx alone kept approx, docs/results/channels.md)."""

SPARSE_NCUT_FROM = 2000
"""From this many subscriptions ``spectral-ncut`` runs :func:`~routing.channels.methods.spectral_ncut_sparse`
(one node per distinct window, sparse J, ``eigsh``); below it, the dense steps on the N x N J."""

RECLUSTER_RESTARTS = 1
"""k-means restarts of ``spectral-ncut`` in :func:`recluster` from :data:`SPARSE_NCUT_FROM` subscriptions
(the channels job's re-clustering); ``siftstream plan channels`` keeps the contract's 10 (§4.1).
Why one: docs/decisions/channels-recluster-at-scale.md."""

RECLUSTER_EIGEN_TOL = 1e-4
"""``eigsh``'s relative tolerance for ``spectral-ncut`` in :func:`recluster` from :data:`SPARSE_NCUT_FROM`
subscriptions (``siftstream plan channels``: 0, machine precision). k-means on the unit rows sees only
the span of the K eigenvectors, which this tolerance keeps (docs/decisions/channels-recluster-at-scale.md)."""

DENSE_SIMILARITY_LIMIT = 8000
""":func:`recluster` refuses ``kmeans``, ``spectral-rassoc`` (which need the dense N x N J, 8 N² bytes
per copy) and ``ov`` (the dense N x N overlap O) beyond this many subscriptions; ``auto`` then
leaves them out."""


HOLDOUT_FRACTION = 0.25
"""``auto`` scores its candidates on the newest this share of the sample (rounded down)."""

HOLDOUT_MIN_EVENTS = 100
"""...when that share holds at least this many events; on a smaller sample ``auto`` fits and scores
on the whole sample (a handful of held-out events says little about the stream that follows)."""


def holdout_split(events: int, fraction: float = HOLDOUT_FRACTION, minimum: int = HOLDOUT_MIN_EVENTS) -> int:
    """The index of the first held-out event of a sample of ``events`` (oldest first): the newest
    ``floor(events * fraction)`` are held out when they are at least ``minimum``; else ``events``
    (nothing held out).

    >>> holdout_split(2000), holdout_split(5), holdout_split(399), holdout_split(400)
    (1500, 5, 399, 300)
    """
    held = int(events * fraction)
    return events - held if held >= minimum else events


@dataclass
class PreparedInstance:
    """An instance with its match matrix and (lazily) its similarity J."""

    instance: ChannelInstance
    hits: npt.NDArray[np.bool_]
    _similarity: npt.NDArray[np.float64] | None = None

    @classmethod
    def of(cls, instance: ChannelInstance) -> PreparedInstance:
        return cls(instance, derive_hits(instance.filters, instance.events))

    @property
    def similarity(self) -> npt.NDArray[np.float64]:
        if self._similarity is None:
            self._similarity = jaccard(recent_windows(self.hits, self.instance.psi))
        return self._similarity


def run_method(
    prep: PreparedInstance, method: str, sigma: float | None = None, online: bool = False
) -> npt.NDArray[np.int64]:
    """The labels (final channel numbers) of one method other than ``auto``. ``online``: the channels
    job's re-clustering (:func:`recluster`), whose ``spectral-ncut`` on :data:`SPARSE_NCUT_FROM` or more
    subscriptions takes :data:`RECLUSTER_RESTARTS` k-means restarts and :data:`RECLUSTER_EIGEN_TOL`."""
    inst, hits = prep.instance, prep.hits
    ids, k, seed = inst.subscription_ids, inst.k, inst.seed
    if method == "flooding":
        return flooding(len(ids))
    if method == "ideal":
        return ideal(hits, ids)
    if method == "exact":
        return exact(hits, k, ids)
    if method in ("ck", "ov"):
        inst.require_domains(method)
        if method == "ck":
            return ck(inst.filters, inst.domains, k, ids, seed)
        return ov(hits, inst.filters, inst.domains, k, ids, seed, sigma)
    if method == "kmeans":
        return kmeans_on_rows(prep.similarity, k, ids, seed)
    if method == "spectral-rassoc":
        return spectral_rassoc(hits, prep.similarity, k, ids, seed)
    if method == "spectral-ncut":
        if len(ids) >= SPARSE_NCUT_FROM:
            if online:
                return spectral_ncut_sparse(
                    hits, inst.psi, k, ids, seed, sigma, restarts=RECLUSTER_RESTARTS, tol=RECLUSTER_EIGEN_TOL
                )
            return spectral_ncut_sparse(hits, inst.psi, k, ids, seed, sigma)
        return spectral_ncut(hits, prep.similarity, k, ids, seed, sigma)
    if method == "approx":
        return approx(hits, k, ids)
    raise ChannelError(f"unknown method {method!r}: one of {', '.join(CHANNEL_METHODS)}")


RECLUSTER_METHODS = (*BOUNDED_METHODS, "auto")


def recluster(
    hits: npt.NDArray[np.bool_] | sparse.csr_matrix,
    ids: tuple[str, ...],
    k: int,
    method: str = DEFAULT_METHOD,
    psi: int = 20,
    seed: int = 0,
    budget_ms: float = DEFAULT_BUDGET_MS,
    filters: Sequence[Filter] = (),
    domains: Mapping[str, Domain] | None = None,
    times: AutoTimes | None = None,
) -> tuple[npt.NDArray[np.int64], str]:
    """Channels for the match matrix of a live sample: what the channels job re-clusters with.

    ``hits[i, j]`` says whether subscription ``ids[i]`` matched the sample's event j: a dense bool
    array or a :class:`scipy.sparse.csr_matrix` (its stored non-zero entries are the matches). The
    methods are the bounded ones of :func:`plan_channels` and ``auto`` (:func:`select_auto`: the
    candidates of :data:`AUTO_RUN_ORDER`, the :data:`AUTO_ALWAYS` always and the others while
    ``budget_ms`` lasts, fitted on the sample's older events and judged by their false positives on
    its newest :data:`HOLDOUT_FRACTION`). ``ck`` and ``ov`` read the subscriptions' ``filters`` (parsed, in ``ids``
    order) and the attributes' ``domains``; without both they are refused (``auto`` skips them).
    ``spectral-ncut``, the default, runs its sparse form from :data:`SPARSE_NCUT_FROM`
    subscriptions; ``kmeans``, ``spectral-rassoc`` and ``ov`` are refused beyond
    :data:`DENSE_SIMILARITY_LIMIT`, and ``auto`` leaves them out from :data:`SPARSE_NCUT_FROM`
    (one of them alone takes many times the budget there). From :data:`SPARSE_NCUT_FROM`
    subscriptions ``spectral-ncut`` (alone or as auto's candidate) runs k-means with
    :data:`RECLUSTER_RESTARTS` restarts and ``eigsh`` with :data:`RECLUSTER_EIGEN_TOL`, where ``siftstream
    plan channels`` keeps the contract's 10 restarts. ``times`` (``auto``): the candidates' costs of
    earlier runs, read to skip a candidate predicted to overrun the budget and updated with this
    run's (:class:`AutoTimes`; the channels job keeps one between re-clusterings). Returns the
    labels and the method that made them.

    >>> hits = np.array([[1, 0], [1, 0], [0, 1]], dtype=bool)
    >>> labels, used = recluster(hits, ("a", "b", "c"), 2, "approx")
    >>> labels.tolist(), used
    ([0, 0, 1], 'approx')
    >>> recluster(sparse.csr_matrix(hits), ("a", "b", "c"), 2, "approx")[0].tolist()
    [0, 0, 1]
    """
    if method not in RECLUSTER_METHODS:
        raise ChannelError(f"unknown re-clustering method {method!r}: one of {', '.join(RECLUSTER_METHODS)}")
    if sparse.issparse(hits):
        hits = np.asarray(sparse.csr_matrix(hits).toarray() != 0, dtype=bool)
    hits = np.asarray(hits, dtype=bool)
    if filters and len(filters) != len(ids):
        raise ChannelError(f"{len(filters)} filters for {len(ids)} subscriptions")
    inst = ChannelInstance(
        k=k,
        psi=psi,
        seed=seed,
        subscription_ids=ids,
        filters=tuple(filters),
        event_ids=(),
        events=(),
        domains=dict(domains or {}),
    )
    prep = PreparedInstance(inst, hits)
    dense_only = ("kmeans", "spectral-rassoc", "ov")

    def refuse_if_not_applicable(candidate: str) -> None:
        if candidate in ("ck", "ov") and (not filters or not domains):
            raise ChannelError(f"{candidate} needs the subscriptions' filters and the attributes' domains")
        if candidate in dense_only and len(ids) > DENSE_SIMILARITY_LIMIT:
            what = "overlap" if candidate == "ov" else "similarity"
            raise ChannelError(
                f"{candidate} needs the dense {len(ids)} x {len(ids)} {what}: at most "
                f"{DENSE_SIMILARITY_LIMIT} subscriptions"
            )

    if method != "auto":
        refuse_if_not_applicable(method)
        return run_method(prep, method, online=True), method

    def fit(candidate: str, fit_prep: PreparedInstance) -> npt.NDArray[np.int64] | None:
        if candidate in dense_only and len(ids) >= SPARSE_NCUT_FROM:
            return None  # one dense N x N candidate alone would outlast any budget (8,000: ~15 s)
        refuse_if_not_applicable(candidate)
        return run_method(fit_prep, candidate, online=True)

    choice = select_auto(prep, fit, budget_ms, times=times)
    return choice.labels, choice.chosen


@dataclass
class AutoChoice:
    """What ``auto`` chose: the method, its labels, and every candidate's false positives.

    ``sample_fp[m]`` is the FP of candidate m's plan on the whole sample; ``held_out_fp[m]`` on the
    held-out events (the newest ``held_out_events`` of the sample), empty when nothing was held out.
    Candidates are listed in the contract's table order. ``fit_ms[m]``: candidate m's fit time;
    ``skipped``: the candidates the budget left out, in run order."""

    chosen: str
    labels: npt.NDArray[np.int64]
    sample_fp: dict[str, int]
    held_out_fp: dict[str, int]
    held_out_events: int
    refitted: bool = False
    fit_ms: dict[str, float] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()


@dataclass
class AutoTimes:
    """What ``auto``'s candidates cost in earlier runs, to predict the next: per candidate, the fit time
    (ms) per match of the events it was fitted on, the last run's. A prediction scales it linearly by
    the matches of the new fit; the channels job's samples keep their size between re-clusterings,
    so it is mostly the last run's time. Symbols: ``ms_per_match[m]``.

    >>> times = AutoTimes()
    >>> times.record("kmeans", 300.0, 1000)
    >>> times.predict("kmeans", 2000), times.predict("exact", 2000)
    (600.0, None)
    """

    ms_per_match: dict[str, float] = field(default_factory=dict)

    def record(self, candidate: str, ms: float, matches: int) -> None:
        """Keep ``candidate``'s fit time ``ms`` on a sample of ``matches`` matches."""
        self.ms_per_match[candidate] = ms / max(matches, 1)

    def predict(self, candidate: str, matches: int) -> float | None:
        """``candidate``'s predicted fit time (ms) on ``matches`` matches; None when it never ran."""
        rate = self.ms_per_match.get(candidate)
        return None if rate is None else rate * max(matches, 1)


def select_auto(
    prep: PreparedInstance,
    fit: Callable[[str, PreparedInstance], npt.NDArray[np.int64] | None],
    budget_ms: float,
    started: float | None = None,
    times: AutoTimes | None = None,
) -> AutoChoice:
    """``auto``: run the candidates of :data:`AUTO_RUN_ORDER` and keep the best plan.

    ``fit(candidate, fit_prep)`` returns a candidate's labels for the instance ``fit_prep`` (None,
    or :class:`ChannelError` / :class:`ExactLimitError`, when it does not apply). The candidates of
    :data:`AUTO_ALWAYS` (flooding, the baselines and the default method) always run; each other one
    starts only while ``budget_ms`` (from ``started``) lasts and, when ``times`` predicts its fit
    time (:class:`AutoTimes`, from earlier runs), only when that prediction ends within the budget:
    so the optional candidates overrun the budget by at most the one candidate without a
    prediction that started last. ``times`` gets this run's fit times. With h =
    :func:`holdout_split` of the sample's events below its size, every candidate is fitted on the
    events before h and the winner is the fewest false positives on the events from h on (ties: the
    fewest on the whole sample, then the contract's table order). The winner is then refitted on the
    whole sample (a plan fitted on three quarters of the sample loses some quality, and the newest
    events are the nearest to the stream that follows): always when it is one of the baselines,
    which run whatever the budget (so auto's plan is then the baseline's own plan of the sample),
    and otherwise when what is left of the budget covers its fit time scaled by the events. When it
    does not (at 32,000 subscriptions the budget holds spectral-ncut once, not twice), the plan
    fitted on the older events is returned, the plan the held-out score was measured on, except
    that the subscriptions that matched none of the older events but some of the newest are placed
    again by the join rule on the whole sample (fitted blind, they had all joined one channel).
    ``refitted`` says which. With nothing held out, every candidate is fitted and scored on the
    whole sample (the fewest false positives on the sample, ties by table order).

    >>> hits = np.array([[1, 0], [1, 0], [0, 1]], dtype=bool)
    >>> inst = ChannelInstance(2, 20, 0, ("a", "b", "c"), (), (), (), {})
    >>> def fit(method, prep):  # no filters here: ck and ov do not apply
    ...     return None if method in ("ck", "ov") else run_method(prep, method)
    >>> choice = select_auto(PreparedInstance(inst, hits), fit, 2000)
    >>> choice.chosen, choice.labels.tolist(), choice.sample_fp["flooding"], choice.held_out_events
    ('exact', [0, 0, 1], 3, 0)
    """
    started = time.perf_counter() if started is None else started
    hits = prep.hits
    events = hits.shape[1]
    split = holdout_split(events)
    fit_prep = prep if split == events else PreparedInstance(prep.instance, np.ascontiguousarray(hits[:, :split]))
    whole = csr_of(hits)
    held = sparse.csr_matrix(whole[:, split:]) if split < events else None
    fit_matches = int(np.count_nonzero(fit_prep.hits))
    labels_of: dict[str, npt.NDArray[np.int64]] = {}
    fit_ms: dict[str, float] = {}
    skipped: list[str] = []
    for candidate in AUTO_RUN_ORDER:
        if candidate not in AUTO_ALWAYS:
            spent = (time.perf_counter() - started) * 1000
            predicted = times.predict(candidate, fit_matches) if times is not None else None
            if spent > budget_ms or (predicted is not None and spent + predicted > budget_ms):
                skipped.append(candidate)
                continue
        began = time.perf_counter()
        try:
            labels = fit(candidate, fit_prep)
        except (ExactLimitError, ChannelError):
            continue  # exact beyond its limit, ck/ov without filters or domains: not a candidate
        if labels is not None:
            labels_of[candidate] = labels
            fit_ms[candidate] = (time.perf_counter() - began) * 1000
            if times is not None:
                times.record(candidate, fit_ms[candidate], fit_matches)
    tried = [m for m in BOUNDED_METHODS if m in labels_of]  # the table's order: ties go to the first
    assert tried, "flooding always runs"
    sample_fp = {m: false_positives(whole, labels_of[m]) for m in tried}
    held_out_fp = {m: false_positives(held, labels_of[m]) for m in tried} if held is not None else {}
    chosen = min(tried, key=lambda m: (held_out_fp.get(m, 0), sample_fp[m]))
    labels = labels_of[chosen]
    left_ms = budget_ms - (time.perf_counter() - started) * 1000
    affordable = chosen in AUTO_BASELINES or fit_ms[chosen] * events / split <= left_ms
    refit = split < events and chosen != "flooding" and affordable
    if refit:
        refitted = fit(chosen, prep)  # it ran on the older events, so it runs here
        assert refitted is not None
        labels = refitted
    elif split < events and chosen != "flooding":
        labels = _join_unseen(hits, fit_prep.hits, labels, prep.instance)
    return AutoChoice(chosen, labels, sample_fp, held_out_fp, events - split, refit, fit_ms, tuple(skipped))


def _join_unseen(
    hits: npt.NDArray[np.bool_],
    older: npt.NDArray[np.bool_],
    labels: npt.NDArray[np.int64],
    inst: ChannelInstance,
) -> npt.NDArray[np.int64]:
    """A plan fitted on the older events, with the subscriptions that matched none of them but some
    of the newest placed again by the join rule on the whole sample (in id order), as the channels
    job places a new subscription: fitted blind, they all joined the channel that carried least."""
    unseen = ~older.any(axis=1) & hits.any(axis=1)
    if not unseen.any():
        return labels
    placed = labels.copy()
    placed[unseen] = -1
    ids = inst.subscription_ids
    return number_channels(join_isolated(hits, placed, ids, inst.k), ids)


def plan_channels(
    instance: ChannelInstance,
    method: str = DEFAULT_METHOD,
    sigma: float | None = None,
    budget_ms: float = DEFAULT_BUDGET_MS,
) -> dict[str, Any]:
    """The output document of docs/reference/channels.md §5 for one method.

    Raises
    ------
    ChannelError
        An unknown method, a bad ``sigma`` or budget, ``ck``/``ov`` without the domains they need.
    ExactLimitError
        ``exact`` beyond its limit.
    """
    started = time.perf_counter()
    if method not in CHANNEL_METHODS:
        raise ChannelError(f"unknown method {method!r}: one of {', '.join(CHANNEL_METHODS)}")
    if sigma is not None and (isinstance(sigma, bool) or not math.isfinite(sigma) or sigma <= 0):
        raise ChannelError(f"sigma must be a number > 0, got {sigma}")
    if isinstance(budget_ms, bool) or not math.isfinite(budget_ms) or budget_ms < 0:
        raise ChannelError(f"budget-ms must be a number >= 0, got {budget_ms}")
    prep = PreparedInstance.of(instance)
    extra: dict[str, Any] = {}
    if method == "auto":
        choice = select_auto(prep, lambda m, p: run_method(p, m, sigma), budget_ms, started)
        labels = choice.labels
        extra = {"chosen": choice.chosen, "candidates": choice.sample_fp}
        if choice.held_out_events:
            extra |= {
                "held_out_events": choice.held_out_events,
                "held_out_candidates": choice.held_out_fp,
                "refitted": choice.refitted,
            }
    else:
        labels = run_method(prep, method, sigma)
    metrics = plan_metrics(prep.hits, labels)
    ids, event_ids = instance.subscription_ids, instance.event_ids
    doc: dict[str, Any] = {
        "method": method,
        "k": instance.k,
        "psi": instance.psi,
        "seed": instance.seed,
        "bounded": method != "ideal",
        **extra,
        "assignment": {sid: int(labels[i]) for i, sid in sorted(enumerate(ids), key=lambda p: p[1])},
        "channels": [
            {
                "channel": c,
                "subscriptions": sorted(ids[i] for i in members),
                "events": [event_ids[j] for j in events],
                "deliveries": deliveries,
                "false_positives": fp,
            }
            for c, (members, events, deliveries, fp) in enumerate(metrics.channels)
        ],
        "summary": metrics.summary(),
    }
    doc["elapsed_ms"] = round((time.perf_counter() - started) * 1000)
    return doc
