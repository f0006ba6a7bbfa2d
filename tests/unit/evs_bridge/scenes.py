"""Synthetic event streams with known content: a moving box of activity over sparse noise.

Real recordings in ``tests/data/evs-samples`` are almost static; these scenes give the
region finder, tracker and classifier something whose answer is known in advance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evs_bridge.events import EVENT_DTYPE, Events

WIDTH, HEIGHT = 320, 240


@dataclass(frozen=True, slots=True)
class Blob:
    """A ``width`` by ``height`` box whose top-left corner starts at ``x``, ``y`` and moves at
    ``vx``, ``vy`` px/s, firing ``rate_hz`` events spread over its pixels."""

    x: float
    y: float
    width: int
    height: int
    vx: float = 0.0
    vy: float = 0.0
    rate_hz: float = 75_000.0


def scene(
    blobs: list[Blob],
    *,
    start_us: int = 1_000_000,
    duration_us: int = 400_000,
    noise_hz: float = 2_000.0,
    seed: int = 7,
    width: int = WIDTH,
    height: int = HEIGHT,
) -> Events:
    """Time-ordered events of ``blobs`` plus uniform noise over the whole sensor."""
    rng = np.random.default_rng(seed)
    parts = []
    for blob in blobs:
        count = int(blob.rate_hz * duration_us / 1e6)
        t = np.sort(rng.integers(start_us, start_us + duration_us, count))
        elapsed_s = (t - start_us) / 1e6
        x = blob.x + blob.vx * elapsed_s + rng.integers(0, blob.width, count)
        y = blob.y + blob.vy * elapsed_s + rng.integers(0, blob.height, count)
        parts.append(_events(x, y, t, rng, width, height))
    noise = int(noise_hz * duration_us / 1e6)
    parts.append(
        _events(
            rng.integers(0, width, noise),
            rng.integers(0, height, noise),
            rng.integers(start_us, start_us + duration_us, noise),
            rng.integers(0, 2, noise),
            width,
            height,
        )
    )
    events = np.concatenate(parts)
    return events[np.argsort(events["t"], kind="stable")]


def _events(
    x: np.ndarray,
    y: np.ndarray,
    t: np.ndarray,
    rng: np.random.Generator | np.ndarray,
    width: int,
    height: int,
) -> Events:
    polarity = rng if isinstance(rng, np.ndarray) else rng.integers(0, 2, len(t))
    inside = (x >= 0) & (x < width) & (y >= 0) & (y < height)
    events = np.empty(int(inside.sum()), dtype=EVENT_DTYPE)
    events["x"] = np.asarray(x)[inside].astype(np.uint16)
    events["y"] = np.asarray(y)[inside].astype(np.uint16)
    events["p"] = np.asarray(polarity)[inside].astype(np.uint8)
    events["t"] = np.asarray(t)[inside].astype(np.int64)
    return events


def save_npz(path: Path, events: Events, width: int = WIDTH, height: int = HEIGHT) -> Path:
    np.savez(path, events=events, width=width, height=height)
    return path


FACE = Blob(x=100, y=80, width=40, height=40, vx=50.0)
"""Square, slow and dense: the heuristic's ``face``."""
VEHICLE = Blob(x=10, y=150, width=90, height=40, vx=500.0, rate_hz=150_000.0)
"""Wide and fast: ``vehicle``."""
PERSON = Blob(x=250, y=40, width=24, height=80, vy=20.0, rate_hz=90_000.0)
"""Tall: ``person``."""
