"""Deployments and hot-swap: the state of one service, folded from its events, and the
commands that change it (each checked against that state, and turned into an event).

A service has at most one stable version and one candidate in rollout. The events, on
the stream ``deployment:<service>``:

- ``causeway.deployment.rollout_started``: a registered version becomes the candidate
  and receives ``percent`` of the traffic (all of it when nothing is stable yet);
- ``causeway.deployment.traffic_shifted``: the candidate's share changes (0-100);
- ``causeway.deployment.promoted``: the candidate becomes stable, at 100 percent;
- ``causeway.deployment.rolled_back``: during a rollout the candidate is dropped; with no
  rollout, the previous stable version comes back.

``fold`` is the one place that says what an event does to the state; the command checks
and the deployments projection both use it.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, replace
from typing import Any

import orjson

from app.errors import Conflict
from app.store.records import NewEvent

PREFIX = "causeway.deployment."
ROLLOUT_STARTED = PREFIX + "rollout_started"
TRAFFIC_SHIFTED = PREFIX + "traffic_shifted"
PROMOTED = PREFIX + "promoted"
ROLLED_BACK = PREFIX + "rolled_back"
TYPES = frozenset({ROLLOUT_STARTED, TRAFFIC_SHIFTED, PROMOTED, ROLLED_BACK})
SOURCE = "causeway:deployments"
# The widenings that keep every value exactly: a 32-bit integer fits a 64-bit one and a
# double (53 bits of mantissa), a float fits a double; a long does not fit a double, nor
# an integer a float (24 bits), so those are narrowings here.
_EXACT_WIDENINGS = frozenset({("integer", "long"), ("integer", "double"), ("float", "double")})


@dataclass(frozen=True, slots=True)
class DeploymentState:
    service: str
    model: str | None = None
    stable_version: str | None = None
    candidate_version: str | None = None
    candidate_percent: int = 0
    previous_stable: tuple[str, ...] = ()  # earlier stable versions, most recent last
    stream_version: int = 0
    # The stream version of the last event that changed which versions serve (a rollout
    # started, a promotion, a rollback); a traffic shift changes only their shares. Known
    # only to a state folded from the stream (``DeploymentReader.fetch_state``, which the
    # scheduler's rollback reads); one built from the ``deployments`` table leaves it 0.
    versions_changed_at: int = 0
    # The stream version of the last rollback, and who sent it (folded from the stream,
    # as above): the scheduler's own rollbacks are the ones a task requeued onto takes
    # for its own; an operator's is not one.
    rolled_back_at: int = 0
    rolled_back_by: str | None = None
    # The stream version since which the candidate has taken 0 % of the traffic without
    # a break (0: it takes some, or there is none; folded from the stream, as above): a
    # task leased before it was paused may have run on it.
    candidate_idle_since: int = 0

    @property
    def status(self) -> str:
        if self.candidate_version is not None:
            return "rolling_out"
        return "stable" if self.stable_version is not None else "empty"

    def traffic(self) -> dict[str, int]:
        """Version -> percent of requests it serves now."""
        split: dict[str, int] = {}
        if self.candidate_version is not None:
            split[self.candidate_version] = self.candidate_percent
        if self.stable_version is not None:
            split[self.stable_version] = split.get(self.stable_version, 0) + (
                100 - self.candidate_percent if self.candidate_version is not None else 100
            )
        return split


def stream_of(service: str) -> str:
    return f"causeway:deployment:{service}"


def fold(state: DeploymentState, event_type: str, data: dict[str, Any]) -> DeploymentState:
    """The state after one deployment event (the events were checked when appended)."""
    version = state.stream_version + 1
    if event_type == ROLLOUT_STARTED:
        return replace(
            state,
            model=data["model"],
            candidate_version=data["version"],
            candidate_percent=data["percent"],
            stream_version=version,
            versions_changed_at=version,
            candidate_idle_since=version if data["percent"] == 0 else 0,
        )
    if event_type == TRAFFIC_SHIFTED:
        idle = (state.candidate_idle_since or version) if data["percent"] == 0 else 0
        return replace(
            state,
            candidate_percent=data["percent"],
            stream_version=version,
            candidate_idle_since=idle,
        )
    if event_type == PROMOTED:
        earlier = state.previous_stable
        if state.stable_version is not None:
            earlier = (*earlier, state.stable_version)
        return replace(
            state,
            stable_version=state.candidate_version,
            candidate_version=None,
            candidate_percent=0,
            previous_stable=earlier,
            stream_version=version,
            versions_changed_at=version,
            candidate_idle_since=0,
        )
    if event_type == ROLLED_BACK:
        if state.candidate_version is not None:
            return replace(
                state,
                candidate_version=None,
                candidate_percent=0,
                stream_version=version,
                versions_changed_at=version,
                candidate_idle_since=0,
                rolled_back_at=version,
                rolled_back_by=data.get("actor"),
            )
        return replace(
            state,
            stable_version=state.previous_stable[-1],
            previous_stable=state.previous_stable[:-1],
            stream_version=version,
            versions_changed_at=version,
            rolled_back_at=version,
            rolled_back_by=data.get("actor"),
        )
    return replace(state, stream_version=version)


def start_rollout(
    state: DeploymentState,
    *,
    model: str,
    version: str,
    percent: int,
    strategy: str,
    reason: str | None,
    actor: str,
    force: bool = False,
) -> NewEvent:
    if state.candidate_version is not None:
        raise Conflict(
            f"service {state.service!r} is already rolling out version "
            f"{state.candidate_version!r}; promote or roll it back first",
            service=state.service,
        )
    # A service that serves nothing (its only rollout rolled back) may take any model.
    if state.model is not None and state.stable_version is not None and model != state.model:
        raise Conflict(
            f"service {state.service!r} serves model {state.model!r}, not {model!r}",
            service=state.service,
        )
    if version == state.stable_version:
        raise Conflict(f"version {version!r} is already stable on {state.service!r}")
    if state.stable_version is None:
        percent = 100  # nothing else to serve the rest
    data: dict[str, Any] = {
        "model": model, "version": version, "percent": percent, "strategy": strategy,
    }  # fmt: skip
    if force:
        data["force"] = True  # the signature check was overridden: the history says so
    started = _event(state, ROLLOUT_STARTED, data, reason, actor)
    # Naming the model version makes the append itself refuse an unregistered one.
    return replace(started, model_name=model, model_version=version)


def _meant_for(state: DeploymentState, acts_on: str | None, version: str | None) -> None:
    """Refuse a command sent for ``version`` when the version it would act on now is
    ``acts_on``: the state changed since its sender looked (another admin, or a retry of
    a command that went through)."""
    if version is not None and version != acts_on:
        now = "nothing" if acts_on is None else f"version {acts_on!r}"
        raise Conflict(
            f"this command is meant for version {version!r}, but on {state.service!r} it "
            f"would act on {now} now",
            service=state.service,
        )


def shift_traffic(
    state: DeploymentState,
    *,
    percent: int,
    reason: str | None,
    actor: str,
    version: str | None = None,
) -> NewEvent:
    _meant_for(state, state.candidate_version, version)
    if state.candidate_version is None:
        raise Conflict(f"service {state.service!r} has no rollout to shift traffic for")
    if state.stable_version is None and percent != 100:
        raise Conflict(
            f"service {state.service!r} has no stable version to send the other "
            f"{100 - percent} percent to"
        )
    return _event(state, TRAFFIC_SHIFTED, {"percent": percent}, reason, actor)


def promote(
    state: DeploymentState, *, reason: str | None, actor: str, version: str | None = None
) -> NewEvent:
    _meant_for(state, state.candidate_version, version)
    if state.candidate_version is None:
        raise Conflict(f"service {state.service!r} has no rollout to promote")
    data = {"version": state.candidate_version, "replaces": state.stable_version}
    return _event(state, PROMOTED, data, reason, actor)


def rollback(
    state: DeploymentState, *, reason: str, actor: str, version: str | None = None
) -> NewEvent:
    """Drop the candidate, or (with none) restore the stable version before this one.
    ``version``: the one the sender means to drop (a retry then cannot drop the next)."""
    _meant_for(state, state.candidate_version or state.stable_version, version)
    if state.candidate_version is not None:
        data = {"dropped": state.candidate_version, "version": state.stable_version}
    elif state.previous_stable:
        data = {"dropped": state.stable_version, "version": state.previous_stable[-1]}
    else:
        raise Conflict(f"service {state.service!r} has no earlier version to roll back to")
    return _event(state, ROLLED_BACK, data, reason, actor)


def incompatibility(current: dict[str, Any], candidate: dict[str, Any]) -> str | None:
    """Why ``candidate`` cannot take the requests ``current`` accepts, or None.

    Every input the candidate requires must be one the current version requires too (an
    optional one, callers may leave out), with the same type or one that widens to it
    exactly (integer -> long, integer -> double, float -> double); tensor inputs need the
    same dtype, and
    a shape that takes every shape the current one takes (-1, any size, takes only -1).
    """
    given = {spec.get("name"): spec for spec in current.get("inputs", [])}
    for position, spec in enumerate(candidate.get("inputs", [])):
        name = spec.get("name")
        label = name if name is not None else f"#{position}"
        old = given.get(name) if name is not None else _at(current.get("inputs", []), position)
        required = spec.get("required", True)
        if old is None:
            if required:
                return f"the candidate requires input {label!r}, which callers do not send"
            continue
        if required and not old.get("required", True):
            return (
                f"the candidate requires input {label!r}, which is optional now: callers may "
                "leave it out"
            )
        if spec.get("type") == "tensor" or old.get("type") == "tensor":
            if spec.get("tensor-spec", {}).get("dtype") != old.get("tensor-spec", {}).get("dtype"):
                return f"input {label!r} changes tensor dtype"
            if not _shapes_fit(
                old.get("tensor-spec", {}).get("shape", []),
                spec.get("tensor-spec", {}).get("shape", []),
            ):
                return f"input {label!r} changes tensor shape"
            continue
        if not _widens(old.get("type", ""), spec.get("type", "")):
            return f"input {label!r} was {old.get('type')}, the candidate takes {spec.get('type')}"
    return None


def _at(specs: list[dict[str, Any]], position: int) -> dict[str, Any] | None:
    return specs[position] if position < len(specs) else None


def _widens(old: str, new: str) -> bool:
    return old == new or (old, new) in _EXACT_WIDENINGS


def _shapes_fit(old: list[int], new: list[int]) -> bool:
    """Whether a tensor of shape ``new`` takes every tensor ``old`` takes: each size the
    same, or any (-1) in ``new``; where ``old`` takes any size, so must ``new``."""
    return len(old) == len(new) and all(b in (a, -1) for a, b in zip(old, new, strict=True))


@dataclass(frozen=True, slots=True)
class Asked:
    """A command as its sender asked for it: its name, the service, what it named, who
    sent it, and the idempotency key it came with (None: none). A command sent again with
    its key is answered from the event the first one stored (``request_id``), if it asks
    the same (``digest``). A key is the tenant's: sent with a command on another service,
    it asks something else."""

    command: str
    service: str
    parameters: dict[str, Any]
    actor: str
    key: str | None = None

    @property
    def digest(self) -> str:
        asked = {
            "command": self.command, "service": self.service, "actor": self.actor,
            **self.parameters,
        }  # fmt: skip
        return hashlib.sha256(orjson.dumps(asked, option=orjson.OPT_SORT_KEYS)).hexdigest()

    def keyed(self, event: NewEvent) -> NewEvent:
        """``event`` stored under the key's id, with the key and what was asked."""
        if self.key is None:
            return event
        request = {"idempotency_key": self.key, "digest": self.digest}
        data = {**(event.data or {}), "request": request}
        return replace(event, id=request_id(self.key), data=data)

    def is_asked_by(self, data: dict[str, Any]) -> bool:
        """Whether the stored command of ``data`` asked what this one asks."""
        request = data.get("request")
        return isinstance(request, dict) and request.get("digest") == self.digest


def request_id(key: str) -> str:
    """The id the deployment command sent with idempotency key ``key`` is stored under
    (one per tenant; a key is the sender's, any length: its digest names it)."""
    return f"causeway:deployment:request:{hashlib.sha256(key.encode()).hexdigest()[:32]}"


def _event(
    state: DeploymentState, event_type: str, data: dict[str, Any], reason: str | None, actor: str
) -> NewEvent:
    return NewEvent(
        id=f"causeway:deployment:{state.service}:{uuid.uuid4().hex}",
        source=SOURCE,
        type=event_type,
        stream=stream_of(state.service),
        has_data=True,
        data={"service": state.service, **data, "reason": reason, "actor": actor},
        expected_version=state.stream_version,
    )
