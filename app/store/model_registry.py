"""The model registry's rules: signatures (MLflow's shape), their digest, and what an
event produced by a registered model must satisfy.

A signature has ``inputs``, ``outputs`` and ``params``, each a list of column specs
(``name``, ``type``, ``required``) or tensor specs (``type: tensor`` with ``tensor-spec:
{dtype, shape}``) (params: param specs). As MLflow writes them in ``MLmodel`` files, each
list may also come as a JSON string, and any of them as null or not at all (MLflow writes
``"outputs": null`` for ``infer_signature(X)``, and 2.x ``"inputs": null`` for a model with
outputs or params only), but not all three: MLflow refuses such a signature too. The
digest is ``sha256:`` and the hex SHA-256 of the canonical JSON of the validated
signature (keys sorted, no whitespace, defaults filled, absent and null members left out),
so one signature always has one digest, and a null part is the same signature as an
absent one.

Registrations are events (``causeway.model.registered``) with a deterministic id, so the
store's idempotency makes a re-registration of the same content a no-op and a different
one a conflict. Checks at ingest read the registration events themselves, so they never
lag behind a registration: looked up before a group is planned (a registration, once
stored, never changes), and under the append lock again when that lookup found none.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    WithJsonSchema,
    model_validator,
)
from pydantic.config import JsonDict

from app.store.records import (
    EXACT_LIMIT,
    MAX_DATA_DEPTH,
    NewEvent,
    Text,
    contains_nul,
    integral,
    nests_deeper,
    normalise_numbers,
    unique_members,
)
from app.store.timestamps import parse_rfc3339

REGISTERED = "causeway.model.registered"
ALIASED = "causeway.model.aliased"
# A model version names an OpenLineage run that trained it (docs/openlineage.md).
TRAINED = "causeway.model.trained"
SOURCE = "causeway:models"
# A model's name or version, a deployment's service: as the OpenAPI document says it.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"
_NAME = re.compile(NAME_PATTERN.removesuffix("$") + r"\Z")

ColumnType = Literal[
    "boolean", "integer", "long", "float", "double", "string", "binary", "datetime"
]


def _json_list(value: Any) -> Any:
    """A list as MLflow writes it in ``MLmodel``, a JSON string, read as a request's JSON
    is read: an object that names a member twice is refused (I-JSON, RFC 7493), not
    taken as its last."""
    if not isinstance(value, str):
        return value
    found = orjson.loads(value)
    # Nested past what the standard library reads: so deep a default is refused on its
    # own (``_interoperable``).
    with contextlib.suppress(RecursionError):
        json.loads(value, object_pairs_hook=unique_members)  # DuplicateMember: a ValueError
    return found


def _interoperable(value: Any) -> Any:
    """``value`` with its numbers as jsonb gives them back (an integral float as an int, so
    ``1.0`` and ``-0.0`` become ``1`` and ``0``), if every number is finite and within the
    I-JSON range and it nests no deeper than event data may. The digest is taken over its
    JSON, so it must be the JSON that is stored and read back: ``GET /models/{name}``
    shows the signature that has the digest, and registering that again is a re-send.
    JSON has no infinity, orjson writes no integer past 64 bits (an infinite default would
    become null, the same as no default), and the registration event carries it."""
    if nests_deeper(value):
        raise ValueError(f"a default nests arrays and objects more than {MAX_DATA_DEPTH} levels")
    if contains_nul(value):
        raise ValueError("the character U+0000 cannot be stored")
    return normalise_numbers(value)


Dimension = Annotated[
    int, Strict(), Field(gt=-EXACT_LIMIT, lt=EXACT_LIMIT), BeforeValidator(integral)
]  # -1: any size


class ColumnSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Text | None = None
    type: ColumnType
    required: StrictBool = True


class TensorInfo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    dtype: Text
    shape: list[Dimension]


class TensorSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    name: Text | None = None
    type: Literal["tensor"]
    tensor_spec: TensorInfo = Field(alias="tensor-spec")


class ParamSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Text
    type: Text
    # The OpenAPI document's JsonValue (app.web.openapi): I-JSON numbers, no U+0000.
    default: Annotated[
        Any,
        AfterValidator(_interoperable),
        WithJsonSchema({"allOf": [{"$ref": "#/components/schemas/JsonValue"}]}),
    ] = None
    shape: list[Dimension] | None = None


Specs = Annotated[list[TensorSpec | ColumnSpec], BeforeValidator(_json_list)]


_PARTS = ("inputs", "outputs", "params")
# What the OpenAPI document says of a signature beyond its members: one part at least is
# given, not null (the check in Signature), so a generated body that leaves all out is
# no valid one there either.
_ONE_PART_AT_LEAST: JsonDict = {
    "anyOf": [
        {"required": [part], "properties": {part: {"not": {"type": "null"}}}} for part in _PARTS
    ]
}


class Signature(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_ONE_PART_AT_LEAST)
    # None (null, or left out): not given; its readers take it as no columns.
    inputs: Specs | None = None
    outputs: Specs | None = None
    params: Annotated[list[ParamSpec] | None, BeforeValidator(_json_list)] = None

    @model_validator(mode="after")
    def _names_something(self) -> Signature:
        if self.inputs is None and self.outputs is None and self.params is None:
            raise ValueError("a signature names its inputs, outputs or params (one at least)")
        return self

    def canonical(self) -> dict[str, Any]:
        dumped: dict[str, Any] = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        return dumped

    def digest(self) -> str:
        encoded = orjson.dumps(self.canonical(), option=orjson.OPT_SORT_KEYS)
        return "sha256:" + hashlib.sha256(encoded).hexdigest()


@dataclass(frozen=True, slots=True)
class Registration:
    """What ingest needs of a registered model version."""

    digest: str
    enforce_outputs: bool
    outputs: tuple[dict[str, Any], ...]


def is_valid_name(text: str) -> bool:
    return bool(_NAME.match(text))


def registration_id(name: str, version: str) -> str:
    """The id of a version's registration event: lookups go through the (tenant, id) key,
    never through the model columns, which every event the model produced also fills."""
    return f"causeway:model:{name}:{version}"


def registration_event(
    name: str, version: str, signature: Signature, tags: dict[str, str], *, enforce_outputs: bool
) -> NewEvent:
    return NewEvent(
        id=registration_id(name, version),
        source=SOURCE,
        type=REGISTERED,
        stream=f"causeway:model:{name}",
        has_data=True,
        data={
            "name": name,
            "version": version,
            "signature": signature.canonical(),
            "tags": tags,
            "enforce_outputs": enforce_outputs,
        },
        model_name=name,
        model_version=version,
        model_signature=signature.digest(),
    )


def alias_event(name: str, alias: str, version: str | None, after: int) -> NewEvent:
    """Point ``alias`` at ``version`` (None: remove it), decided on the alias's event at
    position ``after`` (0: it had none). The id is the decision's: the same move sent
    twice on the same state, concurrently or as a retry, is stored once (a version holds
    no ``:``, so the two forms never meet)."""
    move = "removed" if version is None else f"set:{version}"
    return NewEvent(
        id=f"causeway:model:{name}:alias:{alias}:after:{after}:{move}",
        source=SOURCE,
        type=ALIASED,
        stream=f"causeway:model:{name}",
        has_data=True,
        data={"name": name, "alias": alias, "version": version},
        model_name=name,
    )


def training_id(name: str, version: str, run_id: str) -> str:
    return f"causeway:model:{name}:{version}:trained:{run_id}"


def training_event(name: str, version: str, run_id: str, causes: tuple[str, ...]) -> NewEvent:
    """``name`` ``version`` was trained by the OpenLineage run ``run_id``; ``causes``: the
    run's last event when the log has one, so lineage runs from the training data on."""
    return NewEvent(
        id=training_id(name, version, run_id),
        source=SOURCE,
        type=TRAINED,
        stream=f"causeway:model:{name}",
        has_data=True,
        data={"name": name, "version": version, "training_run": run_id},
        causes=causes,
        model_name=name,
        model_version=version,
    )


def registration_from(data: dict[str, Any], digest: str) -> Registration:
    """What ingest needs of a registration event's data; outputs never given: none."""
    outputs = (data.get("signature") or {}).get("outputs") or []
    return Registration(digest, bool(data.get("enforce_outputs")), tuple(outputs))


def output_violation(registration: Registration, data: Any) -> tuple[str, str] | None:
    """The first (field, why) by which ``data`` breaks the registered outputs, or None
    (field ``""`` means the data as a whole).

    Named columns are checked by name against a JSON object (unnamed ones beside them are
    not checked). Without names, as MLflow infers the outputs of a plain list or unnamed
    Series, they are checked by position: one column is the data itself, a value or a
    list of values (a batch of predictions); several are a JSON array, one item for each
    column in order. Required columns must be present (not null), and values must have
    the column's type or one that converts to it without loss (an integer for a float or
    double). Tensor outputs are not checked.
    """
    columns = [o for o in registration.outputs if o.get("type") != "tensor"]
    named = [c for c in columns if c.get("name")]
    if named:
        return _by_name(named, data)
    if len(columns) == 1:
        return _one_column(columns[0], data)
    if columns:
        return _by_position(columns, data)
    return None


def _by_name(columns: list[dict[str, Any]], data: Any) -> tuple[str, str] | None:
    if not isinstance(data, dict):
        return "", "the model's outputs are named columns, so data must be a JSON object"
    for column in columns:
        name = column["name"]
        why = _value_problem(repr(name), column, data.get(name))
        if why is not None:
            return name, why
    return None


def _one_column(column: dict[str, Any], data: Any) -> tuple[str, str] | None:
    """One unnamed column: the data is its value, or a list of its values. Data that is
    not JSON (text or bytes of another ``datacontenttype``, in any content mode: as bytes
    here) is a ``binary`` column's value; as UTF-8 text, it is checked as that string
    (sent as a JSON string it would be too); bytes that are no text are no value of
    another type."""
    if isinstance(data, bytes):
        if column["type"] == "binary":
            return None
        try:
            data = data.decode()
        except UnicodeDecodeError:
            why = _value_problem("#0", column, None)
            return None if why is None else ("", f"output #0 must be {column['type']}, got bytes")
    if not isinstance(data, list):
        why = _value_problem("#0", column, data)
        return None if why is None else ("", why)
    for index, value in enumerate(data):
        why = _value_problem(f"#0 in item {index} of data", column, value)
        if why is not None:
            return "", why
    return None


def _by_position(columns: list[dict[str, Any]], data: Any) -> tuple[str, str] | None:
    """Several unnamed columns: the data is a list of their values, in their order (one
    left out at the end is missing)."""
    count = len(columns)
    if not isinstance(data, list):
        return "", (
            f"the model's outputs are {count} unnamed columns, so data must be a JSON array "
            "of their values in order"
        )
    if len(data) > count:
        return "", f"data has {len(data)} values, the model has {count} outputs"
    for index, column in enumerate(columns):
        value = data[index] if index < len(data) else None
        why = _value_problem(f"#{index}", column, value)
        if why is not None:
            return "", why
    return None


def _value_problem(label: str, column: dict[str, Any], value: Any) -> str | None:
    """Why ``value`` (None: missing or null) is no value of output ``column``, or None."""
    kind = column["type"]
    if value is None:
        return f"required output {label} is missing" if column.get("required", True) else None
    if _fits(kind, value):
        return None
    if _fits(_WIDER.get(kind, kind), value):
        return f"output {label} is {value!r}, outside a 32-bit integer's range"
    return f"output {label} must be {kind}, got {type(value).__name__}"


_WIDER = {"integer": "long"}
_NUMBERS = frozenset({"integer", "long", "float", "double"})


def _fits(kind: str, value: Any) -> bool:
    if kind == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind in _NUMBERS:
        # Numbers as ingest takes JSON data (JSON sent as bytes is decoded for the check
        # without passing it): within I-JSON's exact range (2**53, inside a 32-bit float's
        # too), a number with no fraction an integer. MLflow's integer is 32 bits (a
        # rollout that widens it knows: app.store.deployments).
        if not isinstance(value, int | float) or not abs(value) < EXACT_LIMIT:  # NaN too
            return False
        if kind in ("float", "double"):
            return True
        whole = isinstance(value, int) or value.is_integer()
        return whole and (kind == "long" or -(2**31) <= value < 2**31)
    if kind == "string":
        return isinstance(value, str)
    if kind == "datetime":
        return isinstance(value, str) and parse_rfc3339(value)[0] is not None
    if kind == "binary":
        if not isinstance(value, str):
            return False
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return False
        return True
    return False
