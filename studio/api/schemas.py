"""The request and response shapes of docs/api.md, from which the OpenAPI document is made.

Request bodies are described precisely but validated loosely: the engine is the judge of a
request and says in its own words what is wrong (a subject id that is a float, an unknown
provider), so every field takes any JSON value here and reaches the engine unchanged.
"""

from typing import Annotated, Any

from ninja import Schema
from pydantic import ConfigDict, Field, WithJsonSchema

ID = {"type": "string"}
# Ids in request bodies: strings, or numbers for the rows numbered by the database.
ID_IN = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
IDS = {"type": "array", "items": ID_IN}
# A name is trimmed; one of spaces only is no name.
NAME = {"type": "string", "minLength": 1, "maxLength": 120, "pattern": r"\S"}
FRAMES = {"type": "string", "enum": ["image", "headshot", "full-body", "clip"]}


class Body(Schema):
    """A JSON object whose fields the engine checks; fields not named here are kept."""

    model_config = ConfigDict(extra="allow")

    def fields(self) -> dict[str, Any]:
        """Return the fields the client sent, as it sent them."""
        return self.model_dump(exclude_unset=True)


def required(*names: str, closed: bool = False) -> ConfigDict:
    """Document `names` as required, and with `closed` no other field than those named; the
    engine, not the schema, refuses a body without one (or with another)."""
    extra: dict[str, Any] = {"required": list(names)}
    if closed:
        extra["additionalProperties"] = False
    return ConfigDict(extra="allow", json_schema_extra=extra)


class SubjectIn(Body):
    model_config = required("name")

    name: Annotated[Any, WithJsonSchema(NAME)] = None


def or_null(schema: dict[str, Any], description: str) -> dict[str, Any]:
    """Document a field the engine also takes as null, which it reads as the field left out
    (a review found nulls taken where the document allowed none)."""
    return {"anyOf": [schema, {"type": "null"}], "description": description}


class ProviderIn(Schema):
    model_config = ConfigDict(json_schema_extra={"additionalProperties": False})

    provider: str
    model: Annotated[
        str | None,
        WithJsonSchema(
            or_null({"type": "string"}, "One of the provider's models; its default otherwise.")
        ),
    ] = None
    candidates: int = Field(1, ge=1, le=8)


class BatchIn(Body):
    # A field no batch takes is refused: a misspelt one would be planned without.
    model_config = required("prompt", "subjects", "providers", closed=True)

    title: Annotated[
        Any, WithJsonSchema(or_null({"type": "string", "maxLength": 200}, "Made up if absent."))
    ] = None
    prompt: Annotated[Any, WithJsonSchema({"type": "string", "pattern": r"\S"})] = None
    subjects: Annotated[Any, WithJsonSchema({**IDS, "minItems": 1})] = None
    references: Annotated[
        Any, WithJsonSchema(or_null(IDS, "Every photo of the subjects if absent."))
    ] = None
    providers: Annotated[
        Any,
        WithJsonSchema({"type": "array", "items": ProviderIn.model_json_schema(), "minItems": 1}),
    ] = None
    frames: Annotated[
        Any,
        WithJsonSchema(or_null({"type": "array", "items": FRAMES}, '["image"] if absent.')),
    ] = None


class SetIn(Body):
    model_config = required("name", "assets")

    name: Annotated[Any, WithJsonSchema(NAME)] = None
    assets: Annotated[Any, WithJsonSchema(IDS)] = None


class ErrorDetail(Schema):
    code: str
    message: str


class ErrorOut(Schema):
    error: ErrorDetail


class SubjectOut(Schema):
    id: str
    name: str
    slug: str


class SubjectPage(Schema):
    items: list[SubjectOut]
    next: str | None = Field(description="The path of the next page; null on the last one.")


class TaskOut(Schema):
    id: str
    batch: str
    kind: str
    state: str
    phase: str
    error: str
    provider: str
    provider_label: str
    model: str
    frame: str
    ordinal: int
    ember_job_id: str
    attempts: int
    protection_released: bool | None
    asset: str | None
    retry_at: str | None = Field(
        description="When a queued task waiting out a back-off (Ember busy or unreachable)"
        " is tried again, ISO 8601 in UTC; null when it is not waiting."
    )


class BatchOut(Schema):
    id: str
    title: str
    created_at: str
    request: dict[str, Any]
    tasks: list[TaskOut]
    progress: dict[str, int]


class CancelReport(Schema):
    cancelled: list[str]
    kept: list[str]
    ended: list[str]


class AssetOut(Schema):
    id: str
    sha256: str
    mime: str
    width: int
    height: int
    size: int
    label: str
    origin: str
    subjects: list[str]
    task: str | None
    batch: str | None
    provider: str
    model: str
    ember_image_id: str
    ember_history_id: str
    created_at: str
    url: str


class SetAsset(Schema):
    id: str
    sha256: str
    mime: str
    url: str


class SetOut(Schema):
    id: str
    name: str
    published_at: str | None
    assets: list[SetAsset]
