"""Summaries of data and of time: the distributions of the QoS model and mergeable estimators.

The layer of ``routing`` just above :mod:`routing.common`: standard library, numpy, scipy and
``routing.common`` only. Every incremental summary takes a batch with ``add``, combines with ``merge`` (exactly,
or up to rounding for :class:`Moments`), and serialises through :mod:`routing.stats.state`, so
Spark streaming state and rolling windows can hold it.

- :mod:`~routing.stats.distributions`: the docs/reference/qos-predict.md ``DIST`` kinds (:func:`parse_distribution`).
- :mod:`~routing.stats.moments`: :class:`Moments` (count, mean, M2, M3) and :class:`Tally`
  (successes out of trials).
- :mod:`~routing.stats.delay_sketch`: :class:`DelaySketch`, a log-bucket quantile/CDF sketch of
  delays.
- :mod:`~routing.stats.sequence_log`: :class:`SequenceLog`, the sequence numbers received, as runs.
- :mod:`~routing.stats.windows`: :class:`RollingWindow`, per key a ring of time buckets of any of
  the above.
- :mod:`~routing.stats.intervals`: :func:`wilson_interval` and :func:`batch_means_interval`.
- :mod:`~routing.stats.state`: the ``State`` form and the ``.npz`` blobs.
"""

from routing.stats.delay_sketch import DelaySketch
from routing.stats.distributions import (
    KINDS,
    Deterministic,
    Distribution,
    Empirical,
    Exponential,
    Gamma,
    Lognormal,
    Uniform,
    parse_distribution,
)
from routing.stats.intervals import batch_means_interval, wilson_interval
from routing.stats.moments import Moments, Tally
from routing.stats.sequence_log import SequenceLog
from routing.stats.state import (
    State,
    child_state,
    nest_state,
    pack_documents,
    pack_state,
    string_array,
    unpack_documents,
    unpack_state,
)
from routing.stats.windows import RollingWindow, WindowItem

__all__ = [
    "KINDS",
    "DelaySketch",
    "Deterministic",
    "Distribution",
    "Empirical",
    "Exponential",
    "Gamma",
    "Lognormal",
    "Moments",
    "RollingWindow",
    "SequenceLog",
    "State",
    "Tally",
    "Uniform",
    "WindowItem",
    "batch_means_interval",
    "child_state",
    "nest_state",
    "pack_documents",
    "pack_state",
    "parse_distribution",
    "string_array",
    "unpack_documents",
    "unpack_state",
    "wilson_interval",
]
