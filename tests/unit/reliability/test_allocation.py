"""Process-wide settings: the predictor leaves them alone, ``bulk_allocation`` restores them.

``predict``, ``compile_prediction`` and ``predict_reliability`` run inside other programs (the
QoS job's Spark driver), so they must not change the cyclic garbage collector or numpy's
huge-page requests; ``routing.reliability.allocation.bulk_allocation`` changes both while it is
entered and restores both on the way out, whatever they were.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from routing.reliability import prediction
from routing.reliability.allocation import bulk_allocation, populated_zeros
from routing.reliability.delay_quantiles import p95_pass
from routing.reliability.prediction import compile_prediction, predict, predict_reliability
from tests.unit.reliability.prediction_systems import diamond

hugepages: Callable[[bool], bool] = np._core.multiarray._set_madvise_hugepage  # type: ignore[attr-defined]


def hugepages_setting() -> bool:
    """numpy's huge-page setting, read without changing it."""
    value = hugepages(True)
    hugepages(value)
    return value


@pytest.fixture(params=[(True, True), (False, False), (True, False), (False, True)], ids=str)
def settings_before(request: pytest.FixtureRequest) -> Iterator[tuple[bool, bool]]:
    """The collector enabled or not and huge pages requested or not before the call; both are
    put back as they were before the test afterwards."""
    enabled, pages = request.param
    was_enabled, was_pages = gc.isenabled(), hugepages_setting()
    (gc.enable if enabled else gc.disable)()
    hugepages(pages)
    try:
        yield enabled, pages
    finally:
        (gc.enable if was_enabled else gc.disable)()
        hugepages(was_pages)


def test_predict_changes_no_process_wide_setting(
    monkeypatch: pytest.MonkeyPatch, settings_before: tuple[bool, bool]
) -> None:
    """Neither while predicting (seen from inside the p95 pass) nor afterwards."""
    seen: list[tuple[bool, bool]] = []

    def watched(*args: Any) -> None:
        seen.append((gc.isenabled(), hugepages_setting()))
        p95_pass(*args)

    monkeypatch.setattr(prediction, "p95_pass", watched)
    system = diamond()
    compiled = compile_prediction(system)
    assert (gc.isenabled(), hugepages_setting()) == settings_before
    predict(system)
    predict(system, compiled=compiled, model="mm1")
    assert seen == [settings_before, settings_before]
    assert (gc.isenabled(), hugepages_setting()) == settings_before
    predict_reliability(compiled)
    assert (gc.isenabled(), hugepages_setting()) == settings_before
    assert gc.get_freeze_count() == 0


def test_bulk_allocation_pauses_the_collector_and_huge_pages_then_restores_them(
    settings_before: tuple[bool, bool],
) -> None:
    with bulk_allocation():
        assert not gc.isenabled() and hugepages_setting() is False
        predict(diamond())
        assert not gc.isenabled() and hugepages_setting() is False
    assert (gc.isenabled(), hugepages_setting()) == settings_before
    assert gc.get_freeze_count() == 0  # the objects made inside were moved, not left frozen


def test_bulk_allocation_restores_the_settings_when_the_body_raises(settings_before: tuple[bool, bool]) -> None:
    with pytest.raises(ValueError, match="no brokers"), bulk_allocation():
        predict({})
    assert (gc.isenabled(), hugepages_setting()) == settings_before


def test_bulk_allocation_nests() -> None:
    enabled = gc.isenabled()
    with bulk_allocation():
        with bulk_allocation():
            assert not gc.isenabled()
        assert not gc.isenabled() and hugepages_setting() is False
    assert gc.isenabled() == enabled


def test_predictions_inside_and_outside_bulk_allocation_are_equal() -> None:
    system = diamond()
    outside = predict(system)
    with bulk_allocation():
        inside = predict(system)
    assert inside == outside


@pytest.mark.parametrize("shape", [7, (3, 5), 1 << 20, (1 << 10, 1 << 10)])  # below and from 4 MiB
def test_populated_zeros_are_zeros(shape: int | tuple[int, ...]) -> None:
    for dtype in (np.float64, np.complex128):
        out = populated_zeros(shape, dtype)
        assert out.shape == (shape if isinstance(shape, tuple) else (shape,)) and out.dtype == dtype
        assert not out.any() and out.flags.writeable
        out[...] = 1
        assert bool((out == 1).all())
