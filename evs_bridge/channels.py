"""Priority channels: which label goes out how urgently, with which ``priority``.

A channel is a name, a priority (the ``priority`` extension attribute of the lineage
events on it, 0 to 9) and a delivery: ``immediate`` (sent the moment it is produced, together
with everything queued before it, so causes still arrive first), ``soon`` (within
``soon_interval_s``, 0.5 s by default) or ``lazy`` (batched, within ``lazy_interval_s``,
2 s by default). Defaults: ``face`` → red (9, immediate), ``vehicle`` → yellow (6, soon),
anything else → green (2, lazy). Yellow is "soon" rather than immediate: a vehicle matters,
but not enough to pay one HTTP request per region.

``parse_channel("face=red:9")`` reads the CLI's ``--channel`` option; a channel not named
red/yellow/green gets its delivery from its priority (≥ 8 immediate, ≥ 5 soon, else lazy).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum


class Delivery(StrEnum):
    IMMEDIATE = "immediate"
    SOON = "soon"
    LAZY = "lazy"


@dataclass(frozen=True, slots=True)
class Channel:
    name: str
    priority: int
    delivery: Delivery


RED = Channel("red", 9, Delivery.IMMEDIATE)
YELLOW = Channel("yellow", 6, Delivery.SOON)
GREEN = Channel("green", 2, Delivery.LAZY)
_KNOWN = {c.name: c.delivery for c in (RED, YELLOW, GREEN)}


def delivery_for(name: str, priority: int) -> Delivery:
    if name in _KNOWN:
        return _KNOWN[name]
    if priority >= 8:
        return Delivery.IMMEDIATE
    return Delivery.SOON if priority >= 5 else Delivery.LAZY


class ChannelMap:
    """Label → channel, with a fallback for labels it does not name."""

    def __init__(
        self, by_label: Mapping[str, Channel] | None = None, *, fallback: Channel = GREEN
    ) -> None:
        self._by_label = dict(by_label if by_label is not None else DEFAULT_CHANNELS)
        self.fallback = fallback

    def channel(self, label: str) -> Channel:
        return self._by_label.get(label, self.fallback)

    @classmethod
    def parse(cls, options: Iterable[str]) -> ChannelMap:
        """The defaults, overridden by ``label=name:priority`` options (``*`` = fallback)."""
        by_label = dict(DEFAULT_CHANNELS)
        fallback = GREEN
        given: set[str] = set()
        for option in options:
            label, channel = parse_channel(option)
            if label in given:  # the last would win quietly: a slip, most likely
                raise ValueError(f"channel {label!r} is given twice")
            given.add(label)
            if label == "*":
                fallback = channel
            else:
                by_label[label] = channel
        return cls(by_label, fallback=fallback)


DEFAULT_CHANNELS: Mapping[str, Channel] = {"face": RED, "vehicle": YELLOW}


def parse_channel(option: str) -> tuple[str, Channel]:
    """``face=red:9`` → (``face``, red with priority 9); raises ``ValueError``."""
    label, sep, rest = option.partition("=")
    name, colon, priority_text = rest.partition(":")
    if not sep or not colon or not label or not name or not priority_text.isdigit():
        raise ValueError(f"channel {option!r} is not LABEL=NAME:PRIORITY, e.g. face=red:9")
    priority = int(priority_text)
    if not 0 <= priority <= 9:
        raise ValueError(f"channel {option!r}: priority must be 0 to 9")
    return label, Channel(name, priority, delivery_for(name, priority))
