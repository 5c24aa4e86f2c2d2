"""streaming/logs.py: the batch line's numbers, the JSON lines, the benign messages, the flags.

The Spark side (infra/spark-log4j2.properties) is checked here by its regular expressions; that
Spark reads the file is seen in a job's output (docs/guide/logs.md says how to look).
"""

from __future__ import annotations

import io
import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.connection import KafkaConnection
from streaming import cli, logs


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """A fresh stream for setup(); the process's logging is set back to the defaults afterwards."""
    out = io.StringIO()
    yield out
    logs.setup()


def _lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


# ---- numbers for people ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ms", "text"),
    [(0.4, "0 ms"), (486.39504600032524, "486 ms"), (9_999.0, "9,999 ms"), (12_345.0, "12.3 s"), (123_456.0, "123 s")],
)
def test_durations_read_as_ms_then_seconds(ms: float, text: str) -> None:
    assert logs.format_duration(ms) == text


def test_a_batch_line_rounds_names_its_units_and_leaves_lists_out() -> None:
    fields = {
        "events": 1_234_567,
        "dead_letters": 0,
        "waste_ratio": 0.123456,
        "report_ms": 486.39504600032524,
        "windows": [1795795870000, 1795795880000],
        "decision": ["kept"],
        "by_topic": {"a": 1},
        "watermark_ms": 0.0,
        "input_rows_per_s": 1234.56,
        "channel_version": 7,
        "mean_wait": 3.14159,
        "missing": None,
        "duration_ms": 15_676.2,
    }
    text = logs.format_fields(fields)
    assert text == (
        "1,234,567 events, 0 dead letters, waste ratio 0.123, report 486 ms, watermark 00:00:00 UTC, "
        "input rows 1,235/s, channel version 7, 3.14 mean wait, in 15.7 s"
    )
    assert "[" not in text and "kept" not in text


def test_json_fields_are_numbers_not_strings() -> None:
    doc = logs.json_fields(
        {"events": 12_500, "report_ms": 486.39504600032524, "ratio": float("nan"), "windows": [1], "ok": True}
    )
    assert doc == {"events": 12_500, "report_ms": 486.395, "ok": True}
    assert json.loads(json.dumps(doc)) == doc


# ---- the lines -----------------------------------------------------------------------------------


def test_a_text_line_has_the_time_the_level_the_job_and_the_message(stream: io.StringIO) -> None:
    logs.setup("info", "text", stream)
    logs.log_batch(logs.get("qos"), 3, {"reports": 120, "alerts": 1, "report_ms": 486.39504600032524})
    (line,) = _lines(stream)
    assert re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3} INFO  qos: batch 3: 120 reports, 1 alerts, report 486 ms", line)


def test_json_lines_carry_ts_level_logger_message_and_the_fields_as_numbers(stream: io.StringIO) -> None:
    logs.setup("info", "json", stream)
    logs.log_batch(
        logs.get("matching"),
        12,
        {"events": 12_500, "matches": 226_000, "windows": [1, 2], "duration_ms": 1234.5678},
        detail={"write_ms": 12.3456},
    )
    logs.get("serve").warning("restart %d in %d s", 1, 2)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logs.get("serve").exception("failed")
    docs = [json.loads(line) for line in _lines(stream)]  # every line is one JSON object
    assert len(docs) == 3
    batch, warning, error = docs
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", batch["ts"])
    assert batch["level"] == "INFO" and batch["logger"] == "siftstream.matching"
    assert batch["message"] == "batch 12: 12,500 events, 226,000 matches, in 1,235 ms"
    assert (batch["job"], batch["batch_id"], batch["events"], batch["matches"]) == ("matching", 12, 12_500, 226_000)
    assert batch["duration_ms"] == 1234.568 and batch["write_ms"] == 12.346
    assert "windows" not in batch
    assert warning["level"] == "WARNING" and warning["message"] == "restart 1 in 2 s"
    assert error["level"] == "ERROR" and "RuntimeError: boom" in error["exc"]


def test_quiet_batch_lines_are_debug_lines(stream: io.StringIO) -> None:
    logs.setup("info", "text", stream)
    logs.log_batch(logs.get("qos"), 1, {"reports": 1}, quiet=True)
    assert stream.getvalue() == ""
    logs.setup("debug", "text", stream)
    logs.log_batch(logs.get("qos"), 1, {"reports": 1}, quiet=True)
    assert "DEBUG qos: batch 1: 1 reports" in stream.getvalue()


def test_setup_again_replaces_its_handler(stream: io.StringIO) -> None:
    first = io.StringIO()
    logs.setup("info", "text", first)
    logs.setup("info", "text", stream)
    logs.get("serve").info("once")
    assert first.getvalue() == "" and len(_lines(stream)) == 1


def test_levels_other_libraries_warn_and_siftstream_follows_the_flag(stream: io.StringIO) -> None:
    logs.setup("warning", "text", stream)
    logs.get("serve").info("hidden")
    logging.getLogger("py4j.clientserver").info("Closing down clientserver connection")
    logging.getLogger("some.library").warning("shown")
    assert [line.split(" ", 2)[2] for line in _lines(stream)] == ["some.library: shown"]


# ---- the benign messages -------------------------------------------------------------------------

COORDINATOR = (
    "GETPID [rdkafka#producer-1] [thrd:main]: Failed to acquire idempotence PID from broker "
    "127.0.0.1:29192/1: Broker: Coordinator load in progress: retrying"
)
REFUSED = (
    "FAIL [rdkafka#consumer-2] [thrd:127.0.0.1:9/bootstrap]: 127.0.0.1:9/bootstrap: Connect to "
    "ipv4#127.0.0.1:9 failed: Connection refused (after 0ms in state CONNECT)"
)


def test_setup_summarises_librdkafkas_benign_messages_once_and_keeps_the_others(stream: io.StringIO) -> None:
    benign = logs.setup("info", "text", stream)
    kafka = logging.getLogger("siftstream.kafka")
    for _ in range(3):
        kafka.warning(COORDINATOR)
        kafka.error(REFUSED)
    kafka.error("FAIL [rdkafka#producer-1] Broker: Topic authorization failed")
    lines = _lines(stream)
    assert len(lines) == 3
    assert " INFO  kafka: the broker's coordinator is still loading" in lines[0] and COORDINATOR in lines[0]
    assert " WARNING kafka: a Kafka broker refused the connection" in lines[1]
    assert lines[2].endswith("ERROR kafka: FAIL [rdkafka#producer-1] Broker: Topic authorization failed")
    assert benign is not None and benign.hidden == {"coordinator-loading": 2, "connection-refused": 2}


def test_the_rules_match_only_their_logger(stream: io.StringIO) -> None:
    logs.setup("info", "text", stream)
    logging.getLogger("siftstream.qos").warning(COORDINATOR)
    assert COORDINATOR in stream.getvalue()


def test_warning_level_hides_the_info_summary(stream: io.StringIO) -> None:
    benign = logs.setup("warning", "text", stream)
    logging.getLogger("siftstream.kafka").warning(COORDINATOR)
    assert stream.getvalue() == "" and benign is not None and benign.hidden == {"coordinator-loading": 1}


def test_debug_shows_every_benign_message(stream: io.StringIO) -> None:
    assert logs.setup("debug", "text", stream) is None
    for _ in range(2):
        logging.getLogger("siftstream.kafka").warning(COORDINATOR)
    assert stream.getvalue().count("Coordinator load in progress") == 2


def test_a_real_librdkafka_client_logs_through_the_filtered_logger(stream: io.StringIO) -> None:
    """A producer pointed at a closed port: librdkafka's refusals reach siftstream.kafka, the
    first is shown and the repeats are hidden (none goes straight to stderr)."""
    from producers.kafka_writer import KafkaWriter

    benign = logs.setup("info", "text", stream)
    writer = KafkaWriter(KafkaConnection("127.0.0.1:9"), **{"reconnect.backoff.ms": 10})
    deadline = time.monotonic() + 20
    while (benign is None or not benign.hidden) and time.monotonic() < deadline:
        writer.poll()  # librdkafka's log lines are handed to the logger here
        time.sleep(0.05)
    lines = _lines(stream)
    assert len(lines) == 1 and " WARNING kafka: a Kafka broker refused the connection" in lines[0]
    assert "Connect to ipv4#127.0.0.1:9 failed: Connection refused" in lines[0]
    assert benign is not None and benign.hidden["connection-refused"] >= 1


def _spark_filters() -> dict[str, str]:
    """The RegexFilters of infra/spark-log4j2.properties: id -> regex."""
    props = dict(
        line.split(" = ", 1)
        for line in logs.SPARK_LOG4J2.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    # a properties file escapes a backslash as two
    filters = {k.split(".")[1]: v for k, v in props.items() if k.startswith("filter.") and k.endswith(".regex")}
    return {k: v.replace("\\\\", "\\") for k, v in filters.items()}


@pytest.mark.parametrize(
    "message",
    [
        "RDD 8 was locally checkpointed, its lineage has been truncated and cannot be recomputed after unpersisting",
        "Current batch is falling behind. The trigger interval is 5000} milliseconds, but spent 15676 milliseconds",
        "Stage 3 contains a task of very large size (1234 KiB). The maximum recommended task size is 1000 KiB.",
        "Unable to load native-hadoop library for your platform... using builtin-java classes where applicable",
        "[queryId = 277d6] [batchId = 0] A job was submitted with scheduler pool qos, which has not been "
        "configured. This can happen when the file that pools are read from isn't set",
        "Failed to cancel job group 14d930cb-ab33-4d0a-91f7-03334dafaea1. Cannot find active jobs for it.",
    ],
)
def test_sparks_benign_messages_are_denied(message: str) -> None:
    # log4j2's RegexFilter matches the whole message (Java's Matcher.matches)
    assert any(re.fullmatch(regex, message) for regex in _spark_filters().values())


def test_sparks_other_warnings_pass() -> None:
    message = "Query siftstream-qos-default terminated with error: Connection to node -1 could not be established"
    assert not any(re.fullmatch(regex, message) for regex in _spark_filters().values())


def test_the_spark_options_follow_the_level_and_format(stream: io.StringIO) -> None:
    assert logs.SPARK_LOG4J2.is_file()
    logs.setup("info", "json", stream)
    opts = logs.spark_java_options()
    assert f"-Dlog4j2.configurationFile=file:{logs.SPARK_LOG4J2}" in opts
    assert "-Dsiftstream.log.appender=JSON" in opts and "-Dsiftstream.log.level=WARN" in opts
    assert "benign" not in opts
    logs.setup("debug", "text", stream)
    opts = logs.spark_java_options()
    assert "-Dsiftstream.log.benign=NEUTRAL" in opts and "-Dsiftstream.log.level=INFO" in opts


# ---- the flags -----------------------------------------------------------------------------------


def test_the_flags_go_before_the_command_and_the_variables_stand_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        monkeypatch.setenv(logs.LOG_FORMAT_ENV, "json")
        assert cli.main(["--log-level", "warning", "plan", "distribution"]) == 2
        assert logs.current() == ("warning", "json")
        (line,) = capsys.readouterr().err.splitlines()  # the error, as JSON
        doc = json.loads(line)
        assert doc["level"] == "ERROR" and "needs --instance FILE" in doc["message"]
        monkeypatch.setenv(logs.LOG_LEVEL_ENV, "loud")
        assert cli.main(["plan", "distribution"]) == 2
        assert "$SIFTSTREAM_LOG_LEVEL: the log level is one of debug, info, warning, error" in capsys.readouterr().err
        monkeypatch.delenv(logs.LOG_LEVEL_ENV)
        monkeypatch.delenv(logs.LOG_FORMAT_ENV)
        assert cli.main(["--log-format", "text", "plan", "distribution"]) == 2
        assert capsys.readouterr().err.startswith("siftstream: error: plan distribution needs --instance FILE")
    finally:
        logs.setup()


def test_a_config_file_after_the_log_flags_is_still_found(tmp_path: Path) -> None:
    from streaming.config import config_path

    argv = ["--log-level", "warning", "--config", str(tmp_path / "x.toml"), "serve"]
    assert config_path(argv, {}, tmp_path) == (tmp_path / "x.toml", True)


def test_a_jvm_call_broken_off_by_ctrl_c_is_said_once_without_its_traceback(stream: io.StringIO) -> None:
    benign = logs.setup("info", "text", stream)
    for _ in range(2):
        try:
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt as exc:
                raise RuntimeError("An error occurred while calling o48.sc") from exc
        except RuntimeError:
            logging.exception("KeyboardInterrupt while sending command.")  # as py4j logs it
    try:
        raise ConnectionResetError("the JVM went away")
    except ConnectionResetError:
        logging.exception("Exception while sending command.")  # not a stop: shown with its traceback
    lines = _lines(stream)
    assert lines[0].endswith(
        " INFO  root: a call into Spark's JVM was interrupted by the stop (Ctrl-C or SIGTERM); expected"
    )
    assert lines[1].endswith(" ERROR root: Exception while sending command.")
    assert "ConnectionResetError: the JVM went away" in stream.getvalue()
    assert "KeyboardInterrupt" not in stream.getvalue()
    assert benign is not None and benign.hidden == {"interrupted-jvm-call": 1}
