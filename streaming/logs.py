"""Logs an operator can read: one setup per process, one line per job per batch, JSON on request.

:func:`setup` configures Python's ``logging`` once for the ``siftstream`` command (and for the
processes it starts): one handler on standard error that writes either short text lines or JSON
Lines, and a filter that hides the messages the libraries print in normal operation
(:data:`BENIGN`). Every part of SiftStream logs under the ``siftstream`` logger (``siftstream.qos``,
``siftstream.serve``, ...); librdkafka, the C client inside confluent-kafka, logs through
``siftstream.kafka`` (:meth:`infra.connection.KafkaConnection.confluent` hands it that logger).
Spark's JVM logs through log4j2, configured by ``infra/spark-log4j2.properties`` with the same
level, format and benign messages (:func:`spark_java_options`).

A text line::

    16:21:05.123 INFO  qos: batch 3: 13,721 records (6,589 links, 3,291 brokers, ...), 120 outputs, ...

the time of day (local), the level, the logger without its ``siftstream.`` prefix, the message. A
JSON line carries ``ts`` (ISO 8601, UTC, milliseconds), ``level``, ``logger``, ``message`` and,
for a batch line, ``job``, ``batch_id`` and the batch's fields as numbers (:func:`log_batch`).

Levels: ``--log-level info`` (the default) shows SiftStream's own lines at info and above and
other libraries' warnings and errors; ``warning`` and ``error`` raise both; ``debug`` shows
SiftStream's debug lines, py4j's and Spark's info lines, and every benign message again.

Invariants: :func:`setup` may be called again (a later call replaces the handler it installed, so
lines are never written twice); a batch line's text leaves out lists and the JSON line keeps every
number of the text line unrounded but for floats (to 3 decimals).

Example
-------
>>> format_fields({"events": 12500, "dead_letters": 0, "report_ms": 486.39504600032524,
...                "waste_ratio": 0.12345, "windows": [1, 2]})
'12,500 events, 0 dead letters, report 486 ms, waste ratio 0.123'
>>> format_duration(12345.0)
'12.3 s'
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import re
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "BENIGN",
    "FORMATS",
    "LEVELS",
    "LOG_FORMAT_ENV",
    "LOG_LEVEL_ENV",
    "BenignFilter",
    "BenignRule",
    "JsonFormatter",
    "TextFormatter",
    "current",
    "environment",
    "format_duration",
    "format_fields",
    "get",
    "json_fields",
    "log_batch",
    "setup",
    "spark_java_options",
    "spark_level",
]

LEVELS = ("debug", "info", "warning", "error")
"""The values of ``--log-level``."""
FORMATS = ("text", "json")
"""The values of ``--log-format``."""
LOG_LEVEL_ENV = "SIFTSTREAM_LOG_LEVEL"
LOG_FORMAT_ENV = "SIFTSTREAM_LOG_FORMAT"
ROOT = "siftstream"
"""The logger every part of SiftStream logs under."""
SPARK_LOG4J2 = Path(__file__).resolve().parent.parent / "infra" / "spark-log4j2.properties"
"""Spark's driver log4j2 configuration: the level, text or JSON, the benign messages denied."""


# ---- the benign messages ------------------------------------------------------------------------


@dataclass(frozen=True)
class BenignRule:
    """A message a library logs in normal operation: hidden, or summarised once.

    Attributes
    ----------
    name : str
        Short name, the key of :attr:`BenignFilter.hidden`.
    pattern : str
        Regular expression searched in the record's message.
    logger : str
        Only records of this logger (or its children) match.
    why : str
        Why it is expected (the docs repeat it: docs/guide/logs.md).
    once : str or None
        When given, the first match is replaced by this message at ``once_level``, followed by the
        original one; later matches are hidden. Without it every match is hidden.
    once_level : int
        The level of that summary.
    exc_pattern : str or None
        When given, the record's traceback must match it too (searched); the summary drops the
        traceback.
    """

    name: str
    pattern: str
    logger: str
    why: str
    once: str | None = None
    once_level: int = logging.INFO
    exc_pattern: str | None = None


BENIGN: tuple[BenignRule, ...] = (
    BenignRule(
        "coordinator-loading",
        r"Coordinator load in progress",
        "siftstream.kafka",
        "a broker that has just started loads its transaction and group coordinators for a few "
        "seconds; librdkafka retries (the idempotent producer's PID, a consumer group's offsets) "
        "until it answers",
        once="the broker's coordinator is still loading (normal for a few seconds after it starts); retrying",
    ),
    BenignRule(
        "connection-refused",
        r"Connect to \S+ failed: Connection refused|Disconnected \(after \d+ms in state UP|"
        r"\d+/\d+ brokers are down",
        "siftstream.kafka",
        "a client that outlives the broker (the broker stopped first, at the end of a run or a "
        "test) retries its connection until it is closed; the first refusal is shown, repeats are "
        "counted",
        once="a Kafka broker refused the connection (expected while a broker stops or starts); retrying, "
        "repeats hidden",
        once_level=logging.WARNING,
    ),
    BenignRule(
        "interrupted-jvm-call",
        r"^(Exception|KeyboardInterrupt) while sending command\.$",
        "root",  # py4j logs these through the logging module's functions, i.e. the root logger
        "Ctrl-C or SIGTERM arrives while the driver waits in a call into the JVM: PySpark's signal "
        "handler cancels the running Spark jobs and the call in flight is broken off; py4j logs it "
        "with a traceback, and the job stops as asked",
        once="a call into Spark's JVM was interrupted by the stop (Ctrl-C or SIGTERM); expected",
        exc_pattern=r"KeyboardInterrupt|RuntimeError: reentrant call",
    ),
)
"""librdkafka's and py4j's benign messages. Spark's are denied in ``infra/spark-log4j2.properties``."""


class BenignFilter(logging.Filter):
    """Hides the records that match a :class:`BenignRule`; the first match of a rule with
    ``once`` passes rewritten as that summary (at its ``once_level``, when ``min_level`` allows).

    ``hidden`` counts the hidden records per rule name.

    >>> f = BenignFilter()
    >>> def rdkafka(text):
    ...     return logging.LogRecord("siftstream.kafka", logging.WARNING, "", 0, text, None, None)
    >>> first, again = (rdkafka("GETPID [p] Broker: Coordinator load in progress: retrying") for _ in "12")
    >>> f.filter(first), first.levelname, first.getMessage()[:33], f.filter(again), f.hidden
    (True, 'INFO', "the broker's coordinator is still", False, {'coordinator-loading': 1})
    >>> f.filter(rdkafka("FAIL [c] Broker: Message size too large"))
    True
    """

    def __init__(self, rules: tuple[BenignRule, ...] = BENIGN, min_level: int = logging.INFO) -> None:
        super().__init__()
        self.rules = [(rule, re.compile(rule.pattern), re.compile(rule.exc_pattern or "")) for rule in rules]
        self.min_level = min_level  # a summary below it is hidden too
        self.hidden: dict[str, int] = {}
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        for rule, regex, exc_regex in self.rules:
            if not (name == rule.logger or name.startswith(rule.logger + ".")):
                continue
            if not regex.search(record.getMessage()):
                continue
            if rule.exc_pattern is not None and not exc_regex.search(_traceback(record)):
                continue
            with self._lock:
                if rule.once is not None and rule.name not in self._seen and rule.once_level >= self.min_level:
                    self._seen.add(rule.name)
                    first = "" if rule.exc_pattern else f"; first: {record.getMessage()}"
                    record.msg, record.args = f"{rule.once}{first}", None
                    record.exc_info = record.exc_text = None
                    record.levelno, record.levelname = rule.once_level, logging.getLevelName(rule.once_level)
                    return True
                self.hidden[rule.name] = self.hidden.get(rule.name, 0) + 1
            return False
        return True


def _traceback(record: logging.LogRecord) -> str:
    if record.exc_text:
        return record.exc_text
    return logging.Formatter().formatException(record.exc_info) if record.exc_info else ""


# ---- numbers for people -------------------------------------------------------------------------


def format_duration(ms: float) -> str:
    """Milliseconds as ``"486 ms"``, from 10 s on as ``"12.3 s"``, from 100 s on as ``"123 s"``."""
    if ms < 10_000:
        return f"{ms:,.0f} ms"
    if ms < 100_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 1000:,.0f} s"


def _time_of(ms: float) -> str:
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.UTC).strftime("%H:%M:%S UTC")


def _is_ratio(key: str) -> bool:
    return any(w in key for w in ("ratio", "reliability", "fraction", "share"))


def _words(key: str) -> str:
    return key.replace("_", " ")


def _one(key: str, value: Any) -> str | None:
    """One field as text, its unit named; None when it stays out of the text line."""
    if value is None or isinstance(value, list | tuple | set | dict):
        return None
    if isinstance(value, bool):
        return f"{_words(key)} {'yes' if value else 'no'}"
    if isinstance(value, str):
        return f"{_words(key)} {value}"
    if not isinstance(value, int | float) or (isinstance(value, float) and not math.isfinite(value)):
        return f"{_words(key)} {value}"
    if key.endswith("_at_ms") or key in ("watermark_ms", "timestamp_ms"):
        return f"{_words(key[:-3])} {_time_of(float(value))}"
    if key == "duration_ms":
        return f"in {format_duration(float(value))}"
    if key.endswith("_ms"):
        return f"{_words(key[:-3])} {format_duration(float(value))}"
    if key.endswith("_per_s"):
        return f"{_words(key[:-6])} {value:,.0f}/s"
    if key.endswith("_s"):
        return f"{_words(key[:-2])} {value:,.1f} s"
    if key.endswith(("version", "_id")):  # an identifier, not an amount
        return f"{_words(key)} {value}"
    if _is_ratio(key):
        return f"{_words(key)} {value:.3f}"
    if isinstance(value, int):
        return f"{value:,} {_words(key)}"
    if abs(value) >= 100:
        return f"{value:,.0f} {_words(key)}"
    return f"{value:.3g} {_words(key)}"


def format_fields(fields: Mapping[str, Any]) -> str:
    """A batch's fields as one readable text: counts with thousands separators and their names,
    durations (``*_ms``) in ms or s, times (``*_at_ms``, ``watermark_ms``) as UTC times of day,
    rates (``*_per_s``) per second, ratios to 3 decimals, identifiers (``*_version``, ``*_id``)
    after their name; lists, dicts and None left out, in the order given.

    >>> format_fields({"records": 1234567, "decode_ms": 12.4, "duration_ms": 15676.2, "rate_per_s": 99.6})
    '1,234,567 records, decode 12 ms, in 15.7 s, rate 100/s'
    """
    return ", ".join(t for k, v in fields.items() if (t := _one(k, v)) is not None)


def json_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a JSON line carries: numbers (floats to 3 decimals), strings, booleans, and
    dicts of numbers; lists and non-finite numbers left out.

    >>> json_fields({"report_ms": 486.39504600032524, "windows": [1], "by_topic": {"a": 2}, "w": None})
    {'report_ms': 486.395, 'by_topic': {'a': 2}}
    """
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if isinstance(value, dict):
            inner = {str(k): v for k, v in value.items() if isinstance(v, int | float) and not isinstance(v, bool)}
            if inner:
                out[key] = inner
        elif isinstance(value, bool | str | int):
            out[key] = value
        elif isinstance(value, float) and math.isfinite(value):
            out[key] = round(value, 3)
    return out


# ---- formatters ---------------------------------------------------------------------------------


def _short(name: str) -> str:
    return name[len(ROOT) + 1 :] if name.startswith(ROOT + ".") else name


class TextFormatter(logging.Formatter):
    """``HH:MM:SS.mmm LEVEL logger: message`` (local time; the ``siftstream.`` prefix dropped).

    >>> r = logging.LogRecord("siftstream.qos", logging.INFO, "", 0, "batch 3: 12 reports", None, None)
    >>> r.created = 0.0; r.msecs = 5.0
    >>> TextFormatter().format(r)[12:]
    ' INFO  qos: batch 3: 12 reports'
    """

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return _dt.datetime.fromtimestamp(record.created).strftime("%H:%M:%S") + f".{int(record.msecs):03d}"

    def format(self, record: logging.LogRecord) -> str:
        line = f"{self.formatTime(record)} {record.levelname:<5} {_short(record.name)}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts`` (ISO 8601 UTC), ``level``, ``logger``, ``message``, the
    batch's ``job``, ``batch_id`` and fields (:func:`log_batch`), ``exc`` for a traceback.

    >>> r = logging.LogRecord("siftstream.qos", logging.INFO, "", 0, "batch 3", None, None)
    >>> r.created, r.msecs = 0.0, 0.0
    >>> r.siftstream_fields = {"job": "qos", "batch_id": 3, "reports": 12}
    >>> JsonFormatter().format(r)
    '{"ts": "1970-01-01T00:00:00.000Z", "level": "INFO", "logger": "siftstream.qos", "message": "batch 3", \
"job": "qos", "batch_id": 3, "reports": 12}'
    """

    RESERVED = ("ts", "level", "logger", "message", "exc")

    def format(self, record: logging.LogRecord) -> str:
        ts = _dt.datetime.fromtimestamp(record.created, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
        doc: dict[str, Any] = {
            "ts": f"{ts}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in getattr(record, "siftstream_fields", {}).items():
            doc[f"field_{key}" if key in self.RESERVED else key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False, default=str)


# ---- setup --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _State:
    level: str = "info"
    fmt: str = "text"


_state = _State()
_handler: logging.Handler | None = None


def current() -> tuple[str, str]:
    """The level and format the last :func:`setup` chose (``("info", "text")`` before any)."""
    return _state.level, _state.fmt


def setup(level: str = "info", fmt: str = "text", stream: TextIO | None = None) -> BenignFilter | None:
    """Configure logging for this process: one handler on ``stream`` (standard error) with the
    text or JSON formatter; SiftStream's loggers at ``level``, other libraries' at warning (info
    for py4j at debug); the benign messages filtered except at debug. Returns the filter (None at
    debug), whose ``hidden`` counts what it hid.

    >>> import io
    >>> out = io.StringIO()
    >>> _ = setup("warning", "json", out)
    >>> get("qos").info("hidden"); get("qos").warning("shown")
    >>> json.loads(out.getvalue())["message"]
    'shown'
    >>> _ = setup()
    """
    global _state, _handler
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)} (got {level!r})")
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)} (got {fmt!r})")
    _state = _State(level, fmt)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    number = getattr(logging, level.upper())
    benign = None if level == "debug" else BenignFilter(min_level=number)
    if benign is not None:
        handler.addFilter(benign)
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    root.addHandler(handler)
    _handler = handler
    # other libraries' info lines (py4j's connection notes, numba's compiler) are not an operator's
    root.setLevel(max(number, logging.WARNING))
    logging.getLogger(ROOT).setLevel(number)
    logging.getLogger("py4j").setLevel(logging.INFO if level == "debug" else max(number, logging.WARNING))
    logging.captureWarnings(True)
    return benign


def get(name: str) -> logging.Logger:
    """The logger of one part: ``get("qos")`` is ``siftstream.qos``."""
    return logging.getLogger(f"{ROOT}.{name}")


def log_batch(
    logger: logging.Logger,
    batch_id: int | None,
    fields: Mapping[str, Any],
    quiet: bool = False,
    detail: Mapping[str, Any] | None = None,
    what: str = "batch",
) -> None:
    """One job's line for one batch: ``batch 3: <fields as text>`` at info (at debug when
    ``quiet``: the job's ``--quiet``, or ``serve`` without ``--verbose``); a JSON line carries
    ``job``, ``batch_id``, the fields and ``detail`` (fields for JSON only, e.g. the stages'
    timings) as numbers (:func:`format_fields`, :func:`json_fields`). ``batch_id`` None and
    ``what`` make a summary line (``what: <fields>``). In a process where nothing set up logging,
    the first call does :func:`setup` with its defaults.

    >>> import io
    >>> out = io.StringIO()
    >>> _ = setup("info", "json", out)
    >>> log_batch(get("qos"), 3, {"reports": 12, "duration_ms": 486.395046}, detail={"step_ms": 1.23456})
    >>> doc = json.loads(out.getvalue())
    >>> doc["message"], doc["job"], doc["batch_id"], doc["duration_ms"], doc["step_ms"]
    ('batch 3: 12 reports, in 486 ms', 'qos', 3, 486.395, 1.235)
    >>> _ = setup()
    """
    if _handler is None and not logging.getLogger().handlers:
        setup()  # a program that runs a job without the command line (bench/, a notebook) sees its lines
    level = logging.DEBUG if quiet else logging.INFO
    if not logger.isEnabledFor(level):
        return
    head = what if batch_id is None else f"{what} {batch_id}"
    doc = {"job": _short(logger.name), **({} if batch_id is None else {"batch_id": batch_id})}
    doc.update(json_fields({**fields, **(detail or {})}))
    logger.log(level, "%s: %s", head, format_fields(fields), extra={"siftstream_fields": doc})


# ---- Spark --------------------------------------------------------------------------------------


def environment() -> dict[str, str]:
    """The variables that give a child process (serve's feeds) this process's level and format,
    read by its own :func:`setup` call."""
    return {LOG_LEVEL_ENV: _state.level, LOG_FORMAT_ENV: _state.fmt}


def spark_level() -> str:
    """The level of Spark's root log4j2 logger for this process's level: Spark's info lines are
    many per batch, so only ``debug`` shows them."""
    return {"debug": "INFO", "info": "WARN", "warning": "WARN", "error": "ERROR"}[_state.level]


def spark_java_options() -> str:
    """JVM options that give Spark's driver ``infra/spark-log4j2.properties`` with this
    process's level and format; at debug the benign messages are let through."""
    opts = [
        f"-Dlog4j2.configurationFile=file:{SPARK_LOG4J2}",
        f"-Dsiftstream.log.level={spark_level()}",
        f"-Dsiftstream.log.appender={'JSON' if _state.fmt == 'json' else 'TEXT'}",
    ]
    if _state.level == "debug":
        opts.append("-Dsiftstream.log.benign=NEUTRAL")
    return " ".join(opts)
