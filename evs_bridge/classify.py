"""What a region of activity probably is, behind a one-method interface users can replace.

``Classifier`` is the whole contract: ``classify(region) -> (label, confidence)``, with
``confidence`` in [0, 1]. The default, ``HeuristicClassifier``, needs no model: it reads the
region's box (pixels), event count and tracked speed (px/s) and applies these rules in
order, first match wins:

1. ``vehicle``: speed ≥ ``vehicle_min_speed_px_s`` (300) and box width ≥
   ``vehicle_min_width_px`` (48) and wider than tall (height/width ≤ 1.0). Fast, big, flat.
2. ``person``: height ≥ ``person_min_height_px`` (48) and height/width ≥
   ``person_min_aspect`` (1.6). Tall and upright, any speed below a vehicle's.
3. ``face``: height/width between ``face_aspect`` (0.8 to 1.5), side between
   ``face_side_px`` (16 to 160), speed ≤ ``face_max_speed_px_s`` (150) and at least
   ``face_min_density`` (0.05) events per pixel: a compact, slow, textured blob.
4. ``other``: everything else.

Confidence is ``base * support``: ``base`` is 0.7 for vehicle, 0.6 for person, 0.5 for face
and 0.3 for other (how much the rule alone is worth), ``support`` = min(1, events / 200)
(few events make a weak case). It is rounded to 3 digits so that the lineage event written
for a region is byte-for-byte the same on every run.

A user's own classifier is any object with that method; ``load_classifier("pkg.mod:Name")``
(or ``pkg.mod.Name``) imports it for the CLI's ``--classifier`` option, instantiating it
with no arguments when it is a class.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from evs_bridge.regions import Region

LABELS = ("vehicle", "person", "face", "other")
_BASE_CONFIDENCE = {"vehicle": 0.7, "person": 0.6, "face": 0.5, "other": 0.3}
_FULL_SUPPORT_EVENTS = 200


@runtime_checkable
class Classifier(Protocol):
    def classify(self, region: Region) -> tuple[str, float]:
        """The region's label and a confidence in [0, 1]."""
        ...


@dataclass(frozen=True, slots=True)
class HeuristicClassifier:
    """The documented size/shape/speed rules (module docstring); thresholds in pixels."""

    vehicle_min_speed_px_s: float = 300.0
    vehicle_min_width_px: int = 48
    person_min_height_px: int = 48
    person_min_aspect: float = 1.6
    face_aspect: tuple[float, float] = (0.8, 1.5)
    face_side_px: tuple[int, int] = (16, 160)
    face_max_speed_px_s: float = 150.0
    face_min_density: float = 0.05

    def classify(self, region: Region) -> tuple[str, float]:
        label = self.label(region)
        support = min(1.0, region.event_count / _FULL_SUPPORT_EVENTS)
        return label, round(_BASE_CONFIDENCE[label] * support, 3)

    def label(self, region: Region) -> str:
        width, height = region.box.width, region.box.height
        aspect = height / width
        speed = region.speed_px_s
        if (
            speed >= self.vehicle_min_speed_px_s
            and width >= self.vehicle_min_width_px
            and aspect <= 1.0
        ):
            return "vehicle"
        if height >= self.person_min_height_px and aspect >= self.person_min_aspect:
            return "person"
        low, high = self.face_aspect
        smallest, largest = self.face_side_px
        if (
            low <= aspect <= high
            and smallest <= min(width, height)
            and max(width, height) <= largest
            and speed <= self.face_max_speed_px_s
            and region.density >= self.face_min_density
        ):
            return "face"
        return "other"


class ClassifierNotFound(Exception):
    """``load_classifier`` could not import the name, or it has no ``classify``."""


def load_classifier(path: str) -> Classifier:
    """Import ``pkg.mod:Name`` or ``pkg.mod.Name``; call it when it is a class."""
    module_name, sep, attribute = path.partition(":")
    if not sep:
        module_name, _, attribute = path.rpartition(".")
    if not module_name or not attribute or module_name.startswith("."):
        # A leading dot asks for a relative import, which has no package to be relative to.
        raise ClassifierNotFound(f"{path!r} is not a dotted path like 'package.module:Name'")
    try:
        found: object = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ClassifierNotFound(f"cannot import {path!r}: {exc}") from exc
    if isinstance(found, type):
        try:
            found = found()
        except Exception as exc:  # a class that takes arguments, or fails as it is made
            raise ClassifierNotFound(f"cannot make {path!r} with no arguments: {exc}") from exc
    if not isinstance(found, Classifier):
        raise ClassifierNotFound(f"{path!r} has no classify(region) method")
    return found
