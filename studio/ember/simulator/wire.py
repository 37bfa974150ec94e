"""Carry HTTP requests and answers as plain values, independent of the socket they travel on."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

JSON = dict[str, Any]


class ApiError(Exception):
    """Carry an error answer (status, code, message) up to the dispatcher."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}

    def response(self) -> Response:
        """Render this error in the contract's error shape."""
        return error_response(self.status, self.code, self.message, self.headers)


@dataclass
class Request:
    """Hold one parsed HTTP request, independent of the socket it came from."""

    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def header(self, name: str) -> str | None:
        """Return a header value by case-insensitive name."""
        return self.headers.get(name.lower())

    def param(self, name: str) -> str | None:
        """Return the first value of a query parameter."""
        values = parse_qs(self.query).get(name)
        return values[0] if values else None

    def json(self) -> JSON:
        """Decode the body as a JSON object or raise a 400."""
        try:
            payload = json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise ApiError(400, "invalid_json", "The request body is not valid JSON.") from None
        if not isinstance(payload, dict):
            raise ApiError(400, "invalid_json", "The request body must be a JSON object.")
        return payload

    def json_or_empty(self) -> JSON:
        """Decode an optional JSON object body; an empty body reads as {}."""
        return self.json() if self.body.strip() else {}


@dataclass
class Response:
    """Describe an answer; the handler turns it into bytes on the wire."""

    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False  # close the connection without sending any answer
    body_delay: float = 0.0  # seconds to wait between the headers and the body


def json_response(
    status: int, payload: JSON, headers: dict[str, str] | None = None, *, drop: bool = False
) -> Response:
    """Build a JSON answer."""
    body = json.dumps(payload).encode("utf-8")
    return Response(status, body, headers=headers or {}, drop=drop)


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> Response:
    """Build an answer in the contract's error shape."""
    return json_response(status, {"error": {"code": code, "message": message}}, headers)


def invalid(message: str) -> ApiError:
    """Build a 400 for a bad request body."""
    return ApiError(400, "invalid_request", message)


def required_str(payload: JSON, name: str) -> str:
    """Return payload[name] if it is a non-empty string, else raise a 400."""
    value = payload.get(name)
    if not isinstance(value, str) or not value.strip():
        raise invalid(f"{name} must be a non-empty string.")
    return value
