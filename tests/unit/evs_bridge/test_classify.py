"""The default heuristic, plugging in a classifier, and label -> channel mapping."""

from __future__ import annotations

import pytest

from evs_bridge.channels import GREEN, RED, YELLOW, Channel, ChannelMap, Delivery, parse_channel
from evs_bridge.classify import (
    Classifier,
    ClassifierNotFound,
    HeuristicClassifier,
    load_classifier,
)
from evs_bridge.regions import Box, Region


def region(width: int, height: int, *, events: int = 400, speed: float = 0.0) -> Region:
    return Region(
        window_index=0,
        window_start_us=0,
        window_end_us=20_000,
        index=0,
        box=Box(0, 0, width - 1, height - 1),
        event_count=events,
        centroid_x=width / 2,
        centroid_y=height / 2,
        on_fraction=0.5,
        velocity_x=speed,
    )


class AlwaysFace:
    """A user's classifier, loaded by dotted path in the tests below."""

    def classify(self, region: Region) -> tuple[str, float]:
        return "face", 0.99


class TestHeuristicClassifier:
    @pytest.mark.parametrize(
        ("shape", "label"),
        [
            (region(90, 40, speed=500.0), "vehicle"),
            (region(24, 80), "person"),
            (region(24, 80, speed=200.0), "person"),
            (region(40, 40, speed=50.0), "face"),
            (region(40, 40, speed=400.0), "other"),
            (region(40, 40, events=20), "other"),  # too sparse for a face
            (region(300, 30), "other"),
            (region(8, 8), "other"),
        ],
    )
    def test_size_shape_and_speed_give_the_documented_label(
        self, shape: Region, label: str
    ) -> None:
        assert HeuristicClassifier().classify(shape)[0] == label

    def test_confidence_grows_with_the_events_up_to_the_base(self) -> None:
        classifier = HeuristicClassifier()
        assert classifier.classify(region(40, 40, events=100))[1] == 0.25
        assert classifier.classify(region(40, 40, events=1000))[1] == 0.5

    def test_thresholds_are_parameters(self) -> None:
        strict = HeuristicClassifier(person_min_aspect=4.0)
        assert strict.classify(region(24, 80))[0] == "other"


class TestLoadClassifier:
    def test_a_class_by_dotted_path_is_instantiated(self) -> None:
        for path in (
            "tests.unit.evs_bridge.test_classify:AlwaysFace",
            "tests.unit.evs_bridge.test_classify.AlwaysFace",
        ):
            loaded = load_classifier(path)
            assert isinstance(loaded, Classifier)
            assert loaded.classify(region(10, 10)) == ("face", 0.99)

    @pytest.mark.parametrize(
        "path", ["nowhere.at_all:Thing", "tests.unit.evs_bridge.test_classify:region", "plain"]
    )
    def test_a_bad_path_says_why(self, path: str) -> None:
        with pytest.raises(ClassifierNotFound):
            load_classifier(path)


class TestChannels:
    def test_defaults_face_red_vehicle_yellow_others_green(self) -> None:
        channels = ChannelMap()
        assert channels.channel("face") == RED == Channel("red", 9, Delivery.IMMEDIATE)
        assert channels.channel("vehicle") == YELLOW == Channel("yellow", 6, Delivery.SOON)
        assert channels.channel("person") == channels.channel("dog") == GREEN
        assert GREEN.priority == 2

    def test_options_override_labels_and_the_fallback(self) -> None:
        channels = ChannelMap.parse(["person=red:9", "*=blue:1", "vehicle=amber:7"])
        assert channels.channel("person") == RED
        assert channels.channel("other") == Channel("blue", 1, Delivery.LAZY)
        assert channels.channel("vehicle") == Channel("amber", 7, Delivery.SOON)
        assert channels.channel("face") == RED

    @pytest.mark.parametrize("option", ["face", "face=red", "face=red:x", "face=red:10", "=red:1"])
    def test_a_malformed_option_is_refused(self, option: str) -> None:
        with pytest.raises(ValueError, match=r"LABEL=NAME:PRIORITY|priority"):
            parse_channel(option)
