"""Prophesee EVT 2.0: a stateful, vectorised decoder of the 32-bit word stream.

Each word has its type in the top 4 bits. CD_OFF (0) / CD_ON (1) carry 6 bits of time low
(bits 22-27), x (bits 11-21) and y (bits 0-10); EVT_TIME_HIGH (8) carries time >> 6 in 28 bits;
EXT_TRIGGER (10) carries time low (22-27), id (8-12) and the edge (bit 0). Time in sensor µs is
``time_high << 6 | time_low``. Events before the first TIME_HIGH have no time and are skipped.
A TIME_HIGH far below the previous one is the 34-bit wrap (+2^34 µs, about 4.8 hours); as in
EVT 3.0 a drop of a few counts is jitter. State carries across ``decode`` calls, including a
word split between two calls, so decoding in pieces equals decoding the whole.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from evs_bridge.decoders.recording import TRIGGER_DTYPE, Triggers, empty_triggers
from evs_bridge.events import EVENT_DTYPE, Events

CD_OFF = 0x0
CD_ON = 0x1
EVT_TIME_HIGH = 0x8
EXT_TRIGGER = 0xA

_WRAP_MIN_DROP = 10
_HIGH_BITS = 28
_WRAP_US = 1 << (_HIGH_BITS + 6)


class Evt2Decoder:
    """Decodes an EVT 2.0 byte stream piece by piece; ``decode`` returns the CD events."""

    def __init__(self) -> None:
        self.words = 0
        self._pending = b""
        self._has_high = False
        self._high = 0  # wrap count << 34 | time_high << 6
        self._triggers: list[Triggers] = []

    def decode(self, data: bytes | bytearray | memoryview) -> Events:
        buffer = self._pending + bytes(data) if self._pending else bytes(data)
        usable = len(buffer) & ~3
        self._pending = buffer[usable:]
        words: npt.NDArray[np.uint32] = np.frombuffer(buffer, dtype="<u4", count=usable // 4)
        self.words += len(words)
        kinds = words >> 28
        is_high = kinds == EVT_TIME_HIGH
        if not self._has_high:
            highs = np.flatnonzero(is_high)
            if len(highs) == 0:
                return np.empty(0, dtype=EVENT_DTYPE)
            words, kinds, is_high = words[highs[0] :], kinds[highs[0] :], is_high[highs[0] :]
            self._has_high = True
        n = len(words)
        if n == 0:
            return np.empty(0, dtype=EVENT_DTYPE)
        table = np.empty(n + 1, dtype=np.int64)
        table[0] = self._high
        if is_high.any():
            values = (words[is_high] & ((1 << _HIGH_BITS) - 1)).astype(np.int64)
            previous = np.empty_like(values)
            previous[0] = (self._high >> 6) & ((1 << _HIGH_BITS) - 1)
            previous[1:] = values[:-1]
            wraps = np.cumsum(previous - values > _WRAP_MIN_DROP)
            base = self._high & ~(_WRAP_US - 1)
            table[1:][is_high] = base + wraps * _WRAP_US + (values << 6)
        positions = np.where(is_high, np.arange(1, n + 1), 0)
        high_at = table[np.maximum.accumulate(positions)]
        self._high = int(high_at[-1])
        time_at = high_at | ((words >> 22) & 0x3F).astype(np.int64)

        is_cd = (kinds == CD_OFF) | (kinds == CD_ON)
        x = (words >> 11) & 0x7FF
        y = words & 0x7FF
        keep = is_cd  # the pipeline drops (and counts) events outside the geometry
        events = np.empty(int(np.count_nonzero(keep)), dtype=EVENT_DTYPE)
        events["x"] = x[keep]
        events["y"] = y[keep]
        events["p"] = kinds[keep]
        events["t"] = time_at[keep]

        is_trigger = kinds == EXT_TRIGGER
        if is_trigger.any():
            found = np.empty(int(np.count_nonzero(is_trigger)), dtype=TRIGGER_DTYPE)
            found["t"] = time_at[is_trigger]
            found["id"] = (words[is_trigger] >> 8) & 0x1F
            found["edge"] = words[is_trigger] & 1
            self._triggers.append(found)
        return events

    def take_triggers(self) -> Triggers:
        if not self._triggers:
            return empty_triggers()
        taken = np.concatenate(self._triggers)
        self._triggers = []
        return taken
