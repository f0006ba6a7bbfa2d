"""``mqtt``: one sensor's MQTT topic bridged to the store until Ctrl-C or SIGTERM, then a
summary of what the bridge counted. The store refusing the bridge (401/403) exits 2; any
other failure that stops the bridge exits 1.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Annotated

import typer

from evs_bridge.cli.options import (
    Backend,
    CellPx,
    Channels,
    ClassifierPath,
    DtUs,
    Key,
    LazyS,
    MinCell,
    MinRegion,
    Neighbourhood,
    Run,
    SegmentWindows,
    Sensor,
    SpoolDir,
    SpoolMb,
    Sustained,
    Target,
    WindowMs,
    build_bridge_settings,
    check_sensor,
    configure_logging,
    fail,
)
from evs_bridge.cli.outputs import open_output
from evs_bridge.mqtt import MAX_SIDE_PX, Broker, MqttBridge, check_topic
from evs_bridge.output import Output, OutputConfig, StoreRefused


def mqtt(
    broker: Annotated[str, typer.Option(metavar="URL", help="the MQTT broker, mqtt://host[:port]")],
    topic: Annotated[str, typer.Option(metavar="TOPIC", help="The sensor's topic")],
    sensor: Sensor,
    target: Target = None,
    key: Key = None,
    spool: SpoolDir = None,
    spool_mb: SpoolMb = 256,
    queue_packets: Annotated[
        int, typer.Option(metavar="COUNT", help="Packets queued for the worker")
    ] = 1024,
    window_ms: WindowMs = 20,
    segment_windows: SegmentWindows = 5,
    cell_px: CellPx = 8,
    min_cell_events: MinCell = 3,
    min_region_events: MinRegion = 30,
    dt_us: DtUs = 2000,
    sustained_windows: Sustained = 10,
    classifier: ClassifierPath = None,
    channel: Channels = None,
    run: Run = None,
    filter_backend: Backend = "numpy",
    neighbourhood: Neighbourhood = 8,
    width: Annotated[
        int | None,
        typer.Option(
            metavar="PX",
            help="Pin the geometry: packets of another width are bad",
            show_default="the first packet's",
        ),
    ] = None,
    height: Annotated[
        int | None,
        typer.Option(
            metavar="PX",
            help="Pin the geometry: packets of another height are bad",
            show_default="the first packet's",
        ),
    ] = None,
    lazy_interval_s: LazyS = 2.0,
) -> None:
    """Bridge one sensor's MQTT topic to the store until Ctrl-C (or SIGTERM)."""
    configure_logging()
    try:
        where = Broker.parse(broker)
    except ValueError as exc:
        fail(str(exc))
    if target is None or key is None:
        fail("give --target and --key")
    check_sensor(sensor)
    settings = build_bridge_settings(
        window_ms,
        segment_windows,
        cell_px,
        min_cell_events,
        min_region_events,
        dt_us,
        sustained_windows,
        classifier,
        channel,
        run,
        filter_backend,
        neighbourhood,
    )
    _check_geometry_and_queue(width, height, queue_packets)
    try:
        check_topic(topic)  # before the spool is opened (made, locked, claimed)
    except ValueError as exc:
        fail(str(exc))
    config = OutputConfig(lazy_interval_s=lazy_interval_s, on_full="drop")
    with open_output(target, key, None, spool, spool_mb, sensor, config) as output:
        try:
            bridge = MqttBridge(
                where,
                topic,
                sensor,
                output,
                settings=settings,
                queue_packets=queue_packets,
                width=width,
                height=height,
            )
        except ValueError as exc:
            output.close()
            fail(str(exc))
        _run_until_stopped(bridge, where, topic, sensor)
        if isinstance(bridge.failure, StoreRefused):
            fail(str(bridge.failure))
        if bridge.failure is not None:
            fail(f"the bridge stopped: {bridge.failure}", code=1)
        _print_summary(bridge, output)


def _check_geometry_and_queue(width: int | None, height: int | None, queue_packets: int) -> None:
    for side in (width, height):
        if side is not None and not 0 < side <= MAX_SIDE_PX:
            fail(f"--width and --height must be 1-{MAX_SIDE_PX}")
    if (width is None) != (height is None):  # as MqttBridge says, before a spool is opened
        fail("give both width and height, or neither")
    if queue_packets < 1:  # a queue of 0 would be unbounded
        fail(f"--queue-packets must be at least 1, not {queue_packets}")


def _run_until_stopped(bridge: MqttBridge, where: Broker, topic: str, sensor: str) -> None:
    """Start ``bridge`` and run it until Ctrl-C, SIGTERM or its failure; then stop it."""
    stopping = threading.Event()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        stopping.set()

    previous = signal.signal(signal.SIGTERM, stop)
    bridge.start()
    if bridge.subscribed.wait(5.0):
        typer.echo(f"subscribed to {where}/{topic} as sensor {sensor}; Ctrl-C stops", err=True)
    else:
        typer.echo(f"{where} does not answer yet; retrying; Ctrl-C stops", err=True)
    try:
        while not stopping.wait(1.0) and bridge.failure is None:
            pass
    except KeyboardInterrupt:
        pass
    finally:
        bridge.stop()
        signal.signal(signal.SIGTERM, previous)


def _print_summary(bridge: MqttBridge, output: Output) -> None:
    s = bridge.stats
    typer.echo(
        f"packets: {s.received} received, {s.processed} processed, {s.dropped} dropped, "
        f"{s.bad} bad, {s.gaps} missing, {s.stale} stale, {s.restarts} restarts; "
        f"sensor events: {s.out_of_geometry} outside the geometry, {s.outliers} outliers; "
        f"events: {output.stats.sent} sent, {output.stats.spooled} spooled, "
        f"{output.stats.dropped} dropped, {output.stats.rejected} rejected"
    )
