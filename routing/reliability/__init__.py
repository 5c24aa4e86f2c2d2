"""Subscriber reliability: the system model, its simulator, the prediction and its inputs.

For a subscriber s, the real-time reliability R_s is the fraction of the events matching s that
reach s before their lifetime ends (Pongthawornkamol et al. §2.2; docs/reference/qos-predict.md
gives the system document, docs/reference/reliability-model.md the model and its formulas).

Modules
-------
system
    A system document validated and compiled: the overlay, which content each subscriber
    matches, and the route tree each event follows (:func:`compile_system`).
simulator
    The compiled system simulated exactly (FIFO brokers, lossy links): the measured R_s and the
    telemetry a real overlay would emit (:func:`simulate`); ``solve_reference`` is its oracle.
evaluation_system
    The paper's 20-broker evaluation tree as a system document (:func:`reliability_tree_system`).
queueing
    Single-queue formulas: M/M/1 and G/G/1 mean waits, the probability of delay, departure,
    thinning and superposition of variability.
grid, propagation, delay_distributions, delay_quantiles, blame
    The prediction's parts: the time grid, rates and variability carried through the overlay,
    the end-to-end delay distributions and on-time probabilities, the p95 search, and the
    brokers and links to blame for each subscriber's misses.
prediction
    R'_s with its interval, delays and warnings (:func:`predict`, ``--model gg1|mm1``).
reference_predictor
    The same prediction computed the readable way, the oracle of the parity tests.
allocation
    :func:`bulk_allocation`, the opt-in process settings for predicting very large systems.
estimation
    The model's inputs estimated online from link and broker telemetry and receipts
    (:class:`TelemetryEstimator`).

``to_spec_output`` exists for both a prediction and a simulation: use it from its module.

Examples
--------
>>> from routing import reliability
>>> round(reliability.mm1_wait(0.5, 10.0), 6)
10.0
"""

from routing.reliability.allocation import bulk_allocation
from routing.reliability.blame import Contributor
from routing.reliability.estimation import (
    BrokerEstimate,
    EstimatedSystem,
    EstimationConfig,
    LinkEstimate,
    LinkLossEstimate,
    PublisherEstimate,
    SubscriberEstimate,
    TelemetryEstimator,
    add_link_delays,
)
from routing.reliability.evaluation_system import reliability_tree_system
from routing.reliability.grid import Grid
from routing.reliability.prediction import (
    MODELS,
    SUPERPOSITION_RULES,
    BrokerPrediction,
    CompiledSystem,
    FilterMatcher,
    Prediction,
    SubscriberPrediction,
    compile_prediction,
    filter_matcher,
    predict,
    predict_reliability,
)
from routing.reliability.queueing import (
    RHO_WARNING,
    WaitModel,
    conditional_delay_scv,
    departure_scv,
    gg1_wait_model,
    hybrid_weight,
    kingman_wait,
    klb_wait,
    mm1_wait,
    qna_delay_probability,
    superposed_scv,
    thinned_scv,
)
from routing.reliability.reference_predictor import predict_reference
from routing.reliability.simulator import (
    Draws,
    Schedule,
    SimulationResult,
    Telemetry,
    draw_inputs,
    fifo_departures,
    measure,
    simulate,
    solve,
    solve_reference,
)
from routing.reliability.system import (
    Network,
    Overlay,
    RouteTree,
    compile_routes,
    compile_system,
    match_content,
    validate_system,
)

__all__ = [
    "MODELS",
    "RHO_WARNING",
    "SUPERPOSITION_RULES",
    "BrokerEstimate",
    "BrokerPrediction",
    "CompiledSystem",
    "Contributor",
    "Draws",
    "EstimatedSystem",
    "EstimationConfig",
    "FilterMatcher",
    "Grid",
    "LinkEstimate",
    "LinkLossEstimate",
    "Network",
    "Overlay",
    "Prediction",
    "PublisherEstimate",
    "RouteTree",
    "Schedule",
    "SimulationResult",
    "SubscriberEstimate",
    "SubscriberPrediction",
    "Telemetry",
    "TelemetryEstimator",
    "WaitModel",
    "add_link_delays",
    "bulk_allocation",
    "compile_prediction",
    "compile_routes",
    "compile_system",
    "conditional_delay_scv",
    "departure_scv",
    "draw_inputs",
    "fifo_departures",
    "filter_matcher",
    "gg1_wait_model",
    "hybrid_weight",
    "kingman_wait",
    "klb_wait",
    "match_content",
    "measure",
    "mm1_wait",
    "predict",
    "predict_reference",
    "predict_reliability",
    "qna_delay_probability",
    "reliability_tree_system",
    "simulate",
    "solve",
    "solve_reference",
    "superposed_scv",
    "thinned_scv",
    "validate_system",
]
