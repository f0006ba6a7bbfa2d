"""Prophesee EVT 3.0: a stateful, vectorised decoder of the 16-bit word stream.

EVT 3.0 is a state machine: ADDR_Y sets the row, TIME_HIGH/TIME_LOW set the clock, VECT_BASE_X
sets a column and polarity that VECT_12/VECT_8 masks then advance. ``Evt3Decoder`` keeps that
state between ``decode`` calls, so a stream can be fed in pieces of any size (a word split
across two pieces is completed by the next call): decoding in pieces gives exactly the output
of decoding the whole. Within a piece the state is replayed with numpy forward-fills (the last
TIME_HIGH, TIME_LOW, ADDR_Y, VECT_BASE_X at or before each word) and a cumulative sum for the
vector column, so there is no Python loop per word.

Time rules, as the upstream ROS decoder (event_camera_codecs) applies them:
- words are skipped until a TIME_HIGH and then a TIME_LOW have been seen (TIME_HIGH words in
  the skipped part still set the clock); rows and columns set before that point are ignored;
- time = TIME_HIGH << 12 | TIME_LOW, in sensor µs; TIME_HIGH does not reset TIME_LOW;
- a TIME_HIGH more than ``_WRAP_MIN_DROP`` counts below the previous one is the 24-bit wrap
  (+2^24 µs); a smaller drop, or a TIME_LOW stepping back, is sensor jitter, not a wrap;
- events outside the sensor geometry are dropped (the row defaults to 0 until an ADDR_Y);
- events leave in stream order, so ``t`` can step back by the few µs the sensor does (both
  sample recordings happen to be monotonic); the filters work in stream order for this reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from evs_bridge.decoders.recording import TRIGGER_DTYPE, Triggers, empty_triggers
from evs_bridge.events import EVENT_DTYPE, Events

ADDR_Y = 0x0
ADDR_X = 0x2
VECT_BASE_X = 0x3
VECT_12 = 0x4
VECT_8 = 0x5
TIME_LOW = 0x6
TIME_HIGH = 0x8
EXT_TRIGGER = 0xA

_WRAP_MIN_DROP = 10
"""TIME_HIGH steps back by a few counts without a wrap; upstream uses the same margin."""
_WRAP_US = 1 << 24
_BITS12 = np.arange(12, dtype=np.uint16)
_BITS8 = np.arange(8, dtype=np.uint16)

Words = npt.NDArray[np.uint16]
Int64s = npt.NDArray[np.int64]


class Evt3Decoder:
    """Decodes an EVT 3.0 byte stream piece by piece; ``decode`` returns the CD events.

    External-trigger events are collected on the side: ``take_triggers()`` returns (and
    forgets) those decoded since the last call. ``words`` counts the 16-bit words consumed.
    """

    def __init__(self) -> None:
        self.words = 0
        self._pending = b""
        self._has_high = False
        self._has_time = False
        self._high = 0  # wrap count << 24 | TIME_HIGH << 12
        self._low = 0
        self._y = 0
        self._base_x = 0
        self._polarity = 0
        self._triggers: list[Triggers] = []

    @property
    def has_time(self) -> bool:
        """Whether the first TIME_HIGH + TIME_LOW have been seen (events flow only after)."""
        return self._has_time

    def decode(self, data: bytes | bytearray | memoryview) -> Events:
        buffer = self._pending + bytes(data) if self._pending else bytes(data)
        usable = len(buffer) & ~1
        self._pending = buffer[usable:]
        words: Words = np.frombuffer(buffer, dtype="<u2", count=usable // 2)
        self.words += len(words)
        if not self._has_time:
            words = self._skip_to_valid_time(words)
        if len(words) == 0:
            return np.empty(0, dtype=EVENT_DTYPE)
        return self._decode_words(words)

    def take_triggers(self) -> Triggers:
        if not self._triggers:
            return empty_triggers()
        taken = np.concatenate(self._triggers)
        self._triggers = []
        return taken

    def _skip_to_valid_time(self, words: Words) -> Words:
        codes = words >> 12
        start = 0
        if not self._has_high:
            highs = np.flatnonzero(codes == TIME_HIGH)
            if len(highs) == 0:
                return words[:0]
            start = int(highs[0])
        lows = np.flatnonzero(codes[start:] == TIME_LOW)
        end = len(words) if len(lows) == 0 else start + int(lows[0])
        highs = np.flatnonzero(codes[:end] == TIME_HIGH)
        if len(highs):
            self._high = int(self._high_times(words[highs])[-1])
            self._has_high = True
        if len(lows) == 0:
            return words[:0]
        self._low = int(words[end]) & 0xFFF
        self._has_time = True
        return words[end + 1 :]

    def _high_times(self, high_words: Words) -> Int64s:
        """Full TIME_HIGH values (wrap count included) for consecutive TIME_HIGH words."""
        values = (high_words & 0xFFF).astype(np.int64)
        previous = np.empty_like(values)
        previous[0] = (self._high >> 12) & 0xFFF
        previous[1:] = values[:-1]
        wraps = np.cumsum(previous - values > _WRAP_MIN_DROP)
        base = self._high & ~(_WRAP_US - 1)
        return base + wraps * _WRAP_US + (values << 12)

    def _decode_words(self, words: Words) -> Events:
        n = len(words)
        codes = words >> 12
        # Forward fills: entry 0 of each compact table is the state carried in from earlier
        # pieces, entry k the value set by the k-th setter word; a running count of setter
        # words picks the entry in force at each word (cumsum is much faster than a running max).
        is_high = codes == TIME_HIGH
        high_table = np.empty(int(np.count_nonzero(is_high)) + 1, dtype=np.int64)
        high_table[0] = self._high
        if len(high_table) > 1:
            high_table[1:] = self._high_times(words[is_high])
        high_at = high_table[np.cumsum(is_high)]

        time_at = high_at | _filled(codes == TIME_LOW, words & 0xFFF, self._low)
        y_at = _filled(codes == ADDR_Y, words & 0x7FF, self._y)

        # The vector column: set by VECT_BASE_X, advanced by 12/8 after each VECT_12/VECT_8.
        is_base = codes == VECT_BASE_X
        step = np.where(codes == VECT_12, 12, np.where(codes == VECT_8, 8, 0)).astype(np.int64)
        steps_before = np.cumsum(step) - step
        base_table = np.empty(int(np.count_nonzero(is_base)) + 1, dtype=np.int64)
        base_table[0] = self._base_x
        base_table[1:] = (words[is_base] & 0x7FF).astype(np.int64) - steps_before[is_base]
        base_index = np.cumsum(is_base)
        base_at = base_table[base_index] + steps_before
        polarity_table = np.empty(len(base_table), dtype=np.int64)
        polarity_table[0] = self._polarity
        polarity_table[1:] = (words[is_base] >> 11) & 1
        polarity_at = polarity_table[base_index]

        events = self._collect(words, codes, time_at, y_at, base_at, polarity_at)

        triggers = np.flatnonzero(codes == EXT_TRIGGER)
        if len(triggers):
            found = np.empty(len(triggers), dtype=TRIGGER_DTYPE)
            found["t"] = time_at[triggers]
            found["id"] = (words[triggers] >> 8) & 0xF
            found["edge"] = words[triggers] & 1
            self._triggers.append(found)

        last = n - 1
        self._high = int(high_at[last])
        self._low = int(time_at[last] & 0xFFF)
        self._y = int(y_at[last])
        self._base_x = int(base_at[last] + step[last])
        self._polarity = int(polarity_at[last])
        return events

    def _collect(
        self,
        words: Words,
        codes: npt.NDArray[np.integer[Any]],
        time_at: Int64s,
        y_at: Int64s,
        base_at: Int64s,
        polarity_at: Int64s,
    ) -> Events:
        singles = np.flatnonzero(codes == ADDR_X)
        rows12, bits12 = _set_bits(words, codes == VECT_12, 0xFFF, _BITS12)
        rows8, bits8 = _set_bits(words, codes == VECT_8, 0xFF, _BITS8)
        word_index = np.concatenate([singles, rows12, rows8])
        x = np.concatenate(
            [
                (words[singles] & 0x7FF).astype(np.int64),
                base_at[rows12] + bits12,
                base_at[rows8] + bits8,
            ]
        )
        polarity = np.concatenate(
            [(words[singles] >> 11) & 1, polarity_at[rows12], polarity_at[rows8]]
        )
        # Events must leave in word order; only a mix of word kinds needs the (stable) sort.
        if sum(1 for group in (singles, rows12, rows8) if len(group)) > 1:
            order = np.argsort(word_index, kind="stable")
            word_index, x, polarity = word_index[order], x[order], polarity[order]
        # Every event leaves, inside the geometry or not: the pipeline drops (and counts)
        # those outside it, for every source alike.
        events = np.empty(len(word_index), dtype=EVENT_DTYPE)
        events["x"] = x
        events["y"] = y_at[word_index]
        events["p"] = polarity
        events["t"] = time_at[word_index]
        return events


def _filled(mask: npt.NDArray[np.bool_], values: npt.NDArray[Any], initial: int) -> Int64s:
    """For each word, the value of the last word in ``mask`` at or before it (else ``initial``)."""
    table = np.empty(int(np.count_nonzero(mask)) + 1, dtype=np.int64)
    table[0] = initial
    table[1:] = values[mask]
    return table[np.cumsum(mask)]


def _set_bits(
    words: Words, mask: npt.NDArray[np.bool_], valid: int, bits: npt.NDArray[np.uint16]
) -> tuple[Int64s, Int64s]:
    """The word index and bit number of every set bit of the vector words in ``mask``."""
    rows = np.flatnonzero(mask)
    if len(rows) == 0:
        return rows, rows
    matrix = ((words[rows] & valid)[:, None] >> bits) & 1
    hit_rows, hit_bits = np.nonzero(matrix)
    return rows[hit_rows], hit_bits.astype(np.int64)
