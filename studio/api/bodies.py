"""A JSON request body as the API reads it: one object, in UTF-8, said as JSON (docs/api.md).

Python's reader is lenient where a client's mistake should be told: it reads NaN and
Infinity (not JSON), lets a key named twice keep its last value, and guesses UTF-16 from
the bytes. A review sent all three over uvicorn and each was taken; a body sent as
another media type (text/plain, a form) was taken as JSON too. Each is a 400 or a 415
saying what was wrong; a body without a Content-Type is still read as JSON.
"""

import json
import sys
from typing import Any

from django.http import HttpRequest

from studio.api.http import ApiError, storable_text

NOT_JSON = "The request body is not valid JSON."
NOT_UTF8 = "The request body must be JSON in UTF-8."
TOO_DEEP = "The request body is nested too deeply to read."
NOT_AN_OBJECT = "The request body must be a JSON object."
UNSTORABLE = "Text in the request must not contain NUL characters or unpaired surrogates."
NAMED_TWICE = "The request body names {key} twice in one object."
NOT_A_NUMBER = "The request body holds {constant}, which JSON has no number for."
# Python reads no longer a whole number (its guard against a quadratic conversion); a
# review's valid 2.4-million-digit number was answered as if it were not JSON.
MOST_DIGITS = sys.get_int_max_str_digits() or 4300
TOO_MANY_DIGITS = "The request body holds a number of {digits:,} digits; at most {most:,} are read."
NOT_JSON_TYPE = (
    "The request body must be JSON, sent as Content-Type: application/json "
    "(this one was sent as {media_type})."
)


def read_object(request: HttpRequest) -> dict[str, Any]:
    """Return the request's body as a dict, or ApiError saying what is wrong with it."""
    _check_media_type(request.content_type)
    try:
        text = request.body.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "invalid_json", NOT_UTF8) from None
    try:
        body = json.loads(
            text, object_pairs_hook=_object, parse_constant=_no_constant, parse_int=_whole
        )
    except RecursionError:  # a body nested thousands deep is not a request
        raise ApiError(400, "invalid_json", TOO_DEEP) from None
    except ValueError:
        raise ApiError(400, "invalid_json", NOT_JSON) from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_request", NOT_AN_OBJECT)
    try:
        storable = _storable(body)
    except RecursionError:  # parsed, but too deep to walk: as one too deep to parse
        raise ApiError(400, "invalid_json", TOO_DEEP) from None
    if not storable:
        raise ApiError(400, "invalid_request", UNSTORABLE)
    return body


def _check_media_type(media_type: str | None) -> None:
    """Refuse a body said to be something other than JSON (none said: JSON)."""
    said = (media_type or "").strip().lower()
    if not said or said == "application/json" or said.endswith("+json"):
        return
    shown = json.dumps(said[:60])
    raise ApiError(415, "unsupported_media_type", NOT_JSON_TYPE.format(media_type=shown))


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            shown = json.dumps(key[:60], ensure_ascii=True)
            raise ApiError(400, "invalid_json", NAMED_TWICE.format(key=shown))
        found[key] = value
    return found


def _whole(digits: str) -> int:
    count = len(digits.lstrip("-"))
    if count > MOST_DIGITS:
        said = TOO_MANY_DIGITS.format(digits=count, most=MOST_DIGITS)
        raise ApiError(400, "invalid_request", said)
    return int(digits)


def _no_constant(constant: str) -> Any:
    raise ApiError(400, "invalid_json", NOT_A_NUMBER.format(constant=constant))


def _storable(value: object) -> bool:
    """Say whether every text in `value` can be stored (`storable_text`)."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return all(_storable(k) and _storable(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_storable(item) for item in value)
    return True
