"""``producers.produce``'s forked workers: whatever SIGTERM handler the parent process has, a
worker takes the default action, so that ``Pool``'s exit (SIGTERM to workers waiting for tasks)
ends them and the parent does not wait for them forever."""

from __future__ import annotations

import multiprocessing as mp
import signal

from producers.produce import _init_worker


def _handler_is_default(_: int) -> bool:
    return signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_a_forked_worker_takes_sigterm_by_default_whatever_the_parent_installed() -> None:
    previous = signal.signal(signal.SIGTERM, lambda *_: None)  # a handler that would not end a worker
    try:
        ctx = mp.get_context("fork")
        with ctx.Pool(2, initializer=_init_worker, initargs=(ctx.Value("q", 0),)) as pool:
            assert pool.map(_handler_is_default, range(4)) == [True] * 4
            pool.close()  # not the exit's terminate: a worker still starting would take its SIGTERM
            pool.join()
        assert signal.getsignal(signal.SIGTERM) != signal.SIG_DFL  # the parent keeps its own
    finally:
        signal.signal(signal.SIGTERM, previous)
