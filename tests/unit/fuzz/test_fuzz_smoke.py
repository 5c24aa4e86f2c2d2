"""The fuzz targets' smoke run (docs/guide/fuzzing.md): every target of ``tests.fuzz.targets`` over
its seeds and 2,000 random byte mutations of them (the coverage-free engine of ``bench/fuzz.py``,
fixed seed), so the unit tier keeps checking the contracts; the million-input run is
``bench/fuzz.py --all``."""

from __future__ import annotations

import random

import pytest

from tests.fuzz.targets import TARGETS, mutate_bytes, mutate_json

SMOKE_INPUTS = 2_000


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_target_keeps_its_contract_on_mutated_seeds(name: str) -> None:
    check, seeds = TARGETS[name]
    pool = seeds()
    assert pool, "every target has valid seeds"
    for seed in pool:
        check(seed)  # the valid inputs themselves pass (a round trip where there is one)
    rng = random.Random(f"smoke-{name}")
    for _ in range(SMOKE_INPUTS):
        check(mutate_bytes(rng.choice(pool), rng))  # any exception but the documented one fails


def test_the_mutators_change_their_input() -> None:
    rng = random.Random(1)
    assert all(mutate_bytes(b"price < 10", rng) != b"price < 10" for _ in range(200))
    assert mutate_json({"a": 1}, bytes([0, 0])) is None  # the root replaced by the palette's null
    assert mutate_json({"a": [1]}, bytes([1, 12])) == {"a": "b1"}
