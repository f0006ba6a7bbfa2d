"""Whether a candidate version can take the requests the stable one accepts."""

from __future__ import annotations

from typing import Any

import pytest

from app.store.deployments import incompatibility


def inputs(*specs: dict[str, Any]) -> dict[str, Any]:
    return {"inputs": list(specs), "outputs": []}


def tensor(*shape: int, dtype: str = "float32") -> dict[str, Any]:
    return {"name": "x", "type": "tensor", "tensor-spec": {"dtype": dtype, "shape": list(shape)}}


@pytest.mark.parametrize(
    ("current", "candidate"),
    [
        # Widenings that keep every value (as MLflow's input enforcement converts them).
        (inputs({"name": "a", "type": "integer"}), inputs({"name": "a", "type": "long"})),
        (inputs({"name": "a", "type": "integer"}), inputs({"name": "a", "type": "double"})),
        (inputs({"name": "a", "type": "float"}), inputs({"name": "a", "type": "double"})),
        (
            inputs({"name": "a", "type": "long"}),
            inputs(
                {"name": "a", "type": "long"}, {"name": "b", "type": "string", "required": False}
            ),
        ),
        (
            inputs({"name": "b", "type": "string", "required": False}),
            inputs({"name": "b", "type": "string", "required": False}),
        ),
        (inputs(tensor(-1, 3)), inputs(tensor(-1, 3))),
        (inputs(tensor(5, 3)), inputs(tensor(-1, 3))),  # a batch of 5 is a batch of any size
    ],
)
def test_what_takes_every_request_is_compatible(
    current: dict[str, Any], candidate: dict[str, Any]
) -> None:
    assert incompatibility(current, candidate) is None


@pytest.mark.parametrize(
    ("current", "candidate", "why"),
    [
        (
            inputs({"name": "a", "type": "double"}),
            inputs({"name": "a", "type": "long"}),
            "input 'a' was double, the candidate takes long",
        ),
        # A long past 2**53 has no double (nor a float) that holds it; an integer past
        # 2**24 no float.
        (
            inputs({"name": "a", "type": "long"}),
            inputs({"name": "a", "type": "double"}),
            "input 'a' was long, the candidate takes double",
        ),
        (
            inputs({"name": "a", "type": "integer"}),
            inputs({"name": "a", "type": "float"}),
            "input 'a' was integer, the candidate takes float",
        ),
        (
            inputs({"name": "a", "type": "long"}),
            inputs({"name": "a", "type": "long"}, {"name": "b", "type": "string"}),
            "the candidate requires input 'b', which callers do not send",
        ),
        (
            inputs({"name": "b", "type": "string", "required": False}),
            inputs({"name": "b", "type": "string"}),
            "the candidate requires input 'b', which is optional now: callers may leave it out",
        ),
        (inputs(tensor(-1, 3)), inputs(tensor(5, 3)), "input 'x' changes tensor shape"),
        (inputs(tensor(-1, 3)), inputs(tensor(-1, 3, 1)), "input 'x' changes tensor shape"),
        (
            inputs(tensor(-1, 3)),
            inputs(tensor(-1, 3, dtype="float64")),
            "input 'x' changes tensor dtype",
        ),
    ],
)
def test_what_would_refuse_a_request_is_named(
    current: dict[str, Any], candidate: dict[str, Any], why: str
) -> None:
    assert incompatibility(current, candidate) == why
