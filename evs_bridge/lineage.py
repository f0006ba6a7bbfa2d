"""The CloudEvents the bridge writes, built so that a re-run writes the very same bytes.

The store is idempotent on event id: an exact re-send answers with the stored position,
the same id with other content is refused (409). So every id here is derived from the
sensor, the time window and the region index, and every attribute from the sensor data:
no wall clock, no random numbers, floats rounded where they are computed.

Ids (sensor ids are ``[A-Za-z0-9._-]``, so ids never contain a comma, which
``causationid`` uses to separate causes)::

    evs:<sensor>[:<run>][:<recording>]:seg:<segment start µs>
    evs:<sensor>[:<run>][:<recording>]:act:<window start µs>:<region index>
    evs:<sensor>[:<run>][:<recording>]:sus:<window start µs>

``<recording>`` is always there: the first 12 hex digits of the file's SHA-256 (replaying
the same file again gives the same ids wherever the file lies, under any name), or the live
session's key. Everything else in an event depends only on what its id depends on (the
recording's content and the parameters, which ``<run>`` tells apart): the file's name or
folder appears nowhere (``dataref`` is its SHA-256, format and offsets), so a renamed or
moved file, or a bag split into parts, re-runs as exact duplicates, never as 409s.
``<run>`` is an optional user tag, for re-running a recording with other parameters
without colliding with the first run's events.

``time``: with the ``unix`` clock domain, a segment's start, or the end of the window in
which an activity was seen (the earliest moment it could be known), as RFC 3339 with
microseconds: derived from the sensor's own timestamps, so it is the same on every run, and
a cause's time never comes after its effect's. With the ``sensor`` clock domain there is no
absolute time to give, so ``time`` is left out (it is optional in CloudEvents) and
``data`` carries the sensor-relative microseconds with ``clock: "sensor"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from evs_bridge.channels import Channel
from evs_bridge.events import ClockDomain
from evs_bridge.regions import Region
from evs_bridge.windows import Segment

SEGMENT_RECORDED = "evs.segment.recorded"
ACTIVITY_DETECTED = "evs.activity.detected"
ACTIVITY_SUSTAINED = "evs.activity.sustained"
SENSOR_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
MAX_SUSTAINED_CAUSES = 10
ATTRIBUTES_BYTES = 1024
"""The store's limit on an event's attributes, as compact JSON (``CAUSEWAY_MAX_ATTRIBUTES_BYTES``
by default): a sustained event names its last ten causes, fewer when long ids (a sensor
and a run of 64 characters) would take its attributes past it."""


@dataclass(frozen=True, slots=True)
class SourceRef:
    """Where the sensor data came from, for the segments' ``dataref``.

    A file is named by its ``sha256`` alone (``uri`` None: the name would make the content
    depend on where the file lies); live input by ``uri`` ``mqtt://host:port/<topic>``;
    ``offset_unit`` says what the offsets count:
    ``byte`` (raw EVT files), ``message`` (rosbag2), ``event`` (npz/npy arrays) or
    ``sequence`` (MQTT packet sequence numbers).
    """

    uri: str | None
    format: str
    offset_unit: str
    recording: str
    """Names the recording in every id (see the module docstring)."""
    sha256: str | None = None


class LineageEvents:
    """Builds the bridge's events for one sensor and one source."""

    def __init__(
        self,
        sensor: str,
        source: SourceRef,
        clock: ClockDomain,
        *,
        width: int,
        height: int,
        run: str | None = None,
    ) -> None:
        if not SENSOR_ID.match(sensor):
            raise ValueError(f"sensor id {sensor!r} must be 1-64 of A-Z a-z 0-9 . _ -")
        if run is not None and not SENSOR_ID.match(run):
            raise ValueError(f"run tag {run!r} must be 1-64 of A-Z a-z 0-9 . _ -")
        self.sensor = sensor
        self.source = source
        self.clock = clock
        self._resolution = [width, height]
        parts = ["evs", sensor]
        if run is not None:
            parts.append(run)
        parts.append(source.recording)
        self._prefix = ":".join(parts)
        self._source = f"evs://{sensor}"
        self.correlation = self._prefix

    def segment_id(self, segment: Segment) -> str:
        return f"{self._prefix}:seg:{segment.start_us}"

    def activity_id(self, region: Region) -> str:
        return f"{self._prefix}:act:{region.window_start_us}:{region.index}"

    def sustained_id(self, window_start_us: int) -> str:
        return f"{self._prefix}:sus:{window_start_us}"

    def segment(self, segment: Segment, *, regions: int, active_windows: int) -> dict[str, Any]:
        dataref: dict[str, Any] = {} if self.source.uri is None else {"uri": self.source.uri}
        dataref |= {
            "format": self.source.format,
            "offsets": [segment.offset_start, segment.offset_end],
            "offset_unit": self.source.offset_unit,
        }
        if self.source.sha256 is not None:
            dataref["sha256"] = self.source.sha256
        data = {
            "sensor": self.sensor,
            "clock": str(self.clock),
            "resolution": self._resolution,
            "window": {
                "start_us": segment.start_us,
                "end_us": segment.end_us,
                "window_us": (segment.end_us - segment.start_us) // len(segment.windows),
                "windows": len(segment.windows),
            },
            "events": {
                "in": segment.events_in,
                "after_hot_pixel": segment.after_hot_pixel,
                "after_background": segment.after_background,
            },
            "filter_ratio": round(segment.filter_ratio, 6),
            "active_windows": active_windows,
            "regions": regions,
            "dataref": dataref,
        }
        return self._envelope(self.segment_id(segment), SEGMENT_RECORDED, segment.start_us, data)

    def activity(
        self, region: Region, label: str, confidence: float, channel: Channel, segment_id: str
    ) -> dict[str, Any]:
        box = region.box
        data = {
            "sensor": self.sensor,
            "clock": str(self.clock),
            "window": {"start_us": region.window_start_us, "end_us": region.window_end_us},
            "region": region.index,
            "bbox": {"x": box.x0, "y": box.y0, "width": box.width, "height": box.height},
            "event_count": region.event_count,
            "centroid": {"x": region.centroid_x, "y": region.centroid_y},
            "velocity_px_s": {"x": region.velocity_x, "y": region.velocity_y},
            "label": label,
            "confidence": confidence,
            "channel": channel.name,
            "track": region.track,
        }
        event = self._envelope(
            self.activity_id(region), ACTIVITY_DETECTED, region.window_end_us, data
        )
        event["causationid"] = segment_id
        event["priority"] = channel.priority
        return event

    def sustained(
        self,
        window_start_us: int,
        window_end_us: int,
        *,
        windows: int,
        run_start_us: int,
        activity_ids: list[str],
        priority: int,
    ) -> dict[str, Any]:
        data = {
            "sensor": self.sensor,
            "clock": str(self.clock),
            "windows": windows,
            "since_us": run_start_us,
            "until_us": window_end_us,
        }
        event = self._envelope(
            self.sustained_id(window_start_us), ACTIVITY_SUSTAINED, window_end_us, data
        )
        event["priority"] = priority
        # What the store counts: every attribute but the data, as compact JSON. The ids
        # are plain ASCII (no JSON escapes), so each cause takes its length and a comma.
        attributes = {name: value for name, value in event.items() if name != "data"}
        room = ATTRIBUTES_BYTES - len(orjson.dumps(attributes)) - len(',"causationid":""')
        causes: list[str] = []
        for cause in reversed(activity_ids[-MAX_SUSTAINED_CAUSES:]):
            if causes and sum(len(c) + 1 for c in causes) + len(cause) > room:
                break
            causes.append(cause)
        event["causationid"] = ",".join(reversed(causes))
        return event

    def _envelope(self, event_id: str, kind: str, at_us: int, data: Any) -> dict[str, Any]:
        event: dict[str, Any] = {
            "specversion": "1.0",
            "id": event_id,
            "source": self._source,
            "type": kind,
            "datacontenttype": "application/json",
            "correlationid": self.correlation,
        }
        if self.clock is ClockDomain.UNIX:
            event["time"] = rfc3339_us(at_us)
        event["data"] = data
        return event


MIN_UNIX_US = 0
MAX_UNIX_US = 253_402_300_800_000_000 - 1
"""The last µs of year 9999, the end of RFC 3339 (the pipeline drops events past it)."""


def rfc3339_us(unix_us: int) -> str:
    """Exact RFC 3339 for microseconds since the epoch (integer arithmetic, no floats)."""
    if not MIN_UNIX_US <= unix_us <= MAX_UNIX_US:
        raise ValueError(f"{unix_us} µs since the epoch is outside 1970-9999")
    seconds, micros = divmod(unix_us, 1_000_000)
    moment = datetime.fromtimestamp(seconds, UTC).replace(microsecond=micros)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
