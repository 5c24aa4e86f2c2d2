"""streaming.session.BatchFunction: Py4J errors from a foreachBatch handler reach the JVM short,
and an interrupted batch is one that Spark's own check (``StreamExecution.isInterruptionException``,
the check a query's stop makes) recognises."""

from __future__ import annotations

import traceback
from typing import Any

import pytest

from streaming.session import BatchFunction


def _raised(handler: Any) -> tuple[BaseException, str]:
    try:
        BatchFunction(handler)(None, 7)
    except Exception as exc:
        return exc, traceback.format_exc()
    raise AssertionError("the handler raised nothing")


def _spark_says_interrupted(spark: Any, text: str) -> bool:
    jvm = spark._jvm
    check = jvm.org.apache.spark.sql.execution.streaming.runtime.StreamExecution.isInterruptionException
    return bool(check(jvm.py4j.Py4JException(text), spark.sparkContext._jsc.sc()))


def test_an_interrupted_call_is_a_short_interruption_that_spark_recognises(spark: Any) -> None:
    jvm = spark._jvm

    def handler(batch: Any, batch_id: int) -> None:
        jvm.java.lang.Thread.currentThread().interrupt()
        jvm.java.lang.Thread.sleep(1000)  # a real InterruptedException, as a stop gives a running batch

    exc, text = _raised(handler)
    assert isinstance(exc, InterruptedError)
    assert "java.lang.InterruptedException" in str(exc) and "Thread.sleep" in str(exc)
    assert len(text) < 1000  # Spark's pattern recurses per character; a Java stack trace overflows it
    assert "\tat " not in text  # no Java stack trace, no chained Python traceback
    assert _spark_says_interrupted(spark, text)


def test_a_failed_call_is_one_line_naming_the_java_exception(spark: Any) -> None:
    def handler(batch: Any, batch_id: int) -> None:
        spark._jvm.java.lang.Thread.sleep(-1)

    exc, text = _raised(handler)
    assert type(exc) is RuntimeError
    assert "java.lang.IllegalArgumentException" in str(exc) and "Thread.sleep" in str(exc)
    assert "Py4JJavaError" not in text and len(text) < 1000
    assert not _spark_says_interrupted(spark, text)


def test_a_wrapped_py4j_error_is_found_in_the_chain(spark: Any) -> None:
    def handler(batch: Any, batch_id: int) -> None:
        try:
            spark._jvm.java.lang.Thread.sleep(-1)
        except Exception as inner:
            raise ValueError("the write failed") from inner

    exc, _text = _raised(handler)
    assert type(exc) is RuntimeError and "IllegalArgumentException" in str(exc)


def test_python_errors_pass_unchanged() -> None:
    error = KeyError("k")

    def handler(batch: Any, batch_id: int) -> None:
        raise error

    with pytest.raises(KeyError) as info:
        BatchFunction(handler)(None, 0)
    assert info.value is error
