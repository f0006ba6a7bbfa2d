"""Log lines as an operator's tools read them: JSON objects, or text a human reads."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from datetime import datetime

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider

from app.telemetry import logs


@pytest.fixture
def written() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger whose lines go to a text buffer, in JSON."""
    sink = io.StringIO()
    handler = logging.StreamHandler(sink)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("tests.telemetry.logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, sink
    logger.removeHandler(handler)


def _lines(sink: io.StringIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in sink.getvalue().splitlines()]


class TestJsonFormatter:
    def test_a_line_is_one_json_object_with_time_level_logger_and_message(
        self, written: tuple[logging.Logger, io.StringIO]
    ) -> None:
        logger, sink = written
        logger.warning("a %s\nwith two lines", "message")
        [line] = _lines(sink)
        assert line["level"] == "WARNING"
        assert line["logger"] == "tests.telemetry.logs"
        assert line["message"] == "a message\nwith two lines"
        assert isinstance(line["time"], str)
        assert line["time"].endswith("Z")
        assert datetime.fromisoformat(line["time"]).utcoffset() is not None
        assert not {"request_id", "tenant", "trace_id", "span_id"} & line.keys()

    def test_a_line_written_for_a_request_carries_its_id_and_tenant(
        self, written: tuple[logging.Logger, io.StringIO]
    ) -> None:
        logger, sink = written
        rid, who = logs.request_id.set("req-1"), logs.tenant.set("acme")
        try:
            logger.info("stored")
        finally:
            logs.tenant.reset(who)
            logs.request_id.reset(rid)
        logger.info("after")
        first, after = _lines(sink)
        assert (first["request_id"], first["tenant"]) == ("req-1", "acme")
        assert "request_id" not in after

    def test_a_line_written_in_a_span_carries_its_trace_and_span_ids(
        self, written: tuple[logging.Logger, io.StringIO]
    ) -> None:
        logger, sink = written
        tracer = TracerProvider().get_tracer(__name__)
        with tracer.start_as_current_span("work") as span:
            logger.info("inside")
        context = span.get_span_context()
        [line] = _lines(sink)
        assert line["trace_id"] == f"{context.trace_id:032x}"
        assert line["span_id"] == f"{context.span_id:016x}"

    def test_an_exception_goes_in_the_same_line(
        self, written: tuple[logging.Logger, io.StringIO]
    ) -> None:
        logger, sink = written
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("failed")
        [line] = _lines(sink)
        assert isinstance(line["exception"], str)
        assert "ValueError: boom" in line["exception"]


class TestTextFormatter:
    def test_a_request_line_names_the_request_and_tenant(self) -> None:
        record = logging.LogRecord("app.x", logging.INFO, __file__, 1, "hello", None, None)
        rid, who = logs.request_id.set("req-1"), logs.tenant.set("acme")
        try:
            text = logs.TextFormatter().format(record)
        finally:
            logs.tenant.reset(who)
            logs.request_id.reset(rid)
        assert text == "INFO app.x: hello [request req-1, tenant acme]"
        assert logs.TextFormatter().format(record) == "INFO app.x: hello"


class TestRequestIdFor:
    def test_a_sane_id_is_kept(self) -> None:
        assert logs.request_id_for(b"0af7651916cd43dd8448eb211c80319c") == (
            "0af7651916cd43dd8448eb211c80319c"
        )

    @pytest.mark.parametrize("sent", [None, b"", b"a b", b"x" * 129, b"\xff", b"a\r\nb"])
    def test_anything_else_is_replaced_by_a_new_id(self, sent: bytes | None) -> None:
        made = logs.request_id_for(sent)
        assert len(made) == 32
        assert int(made, 16) >= 0


def test_lines_go_to_the_stderr_of_their_time_not_of_the_set_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Set up while stderr was a stand-in (a CLI run in process) that is closed since,
    a line still reaches the stderr of its time, with no logging error."""
    root = logging.getLogger()
    kept = root.handlers[:], root.level
    first, now = io.StringIO(), io.StringIO()
    try:
        monkeypatch.setattr("sys.stderr", first)
        logs.configure("json")
        first.close()
        monkeypatch.setattr("sys.stderr", now)
        logging.getLogger("tests.telemetry.later").warning("still heard")
    finally:
        root.handlers[:], level = kept
        root.setLevel(level)
    assert orjson.loads(now.getvalue())["message"] == "still heard"
