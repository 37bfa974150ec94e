"""Small typed readers for settings that come from the environment.

Each one fails loudly on a value it cannot understand: a typo in a deployment
must stop the process, not quietly fall back to a default.
"""

import math
import os
import zoneinfo
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    """Return the variable, or the default when it is unset."""
    return os.environ.get(name, default)


def env_folder(name: str, default: str) -> str:
    """Return the variable naming a folder, or the default when it is unset.

    Set but empty it names no folder: read as a path it is the current directory, where
    a review's command made a new install (an empty line in a service's environment file).
    """
    raw = os.environ.get(name)
    if raw is None:
        return default
    if not raw.strip():
        raise ImproperlyConfigured(
            f"{name} is set but empty: name a folder, or unset it for {default}"
        )
    return raw


def env_bool(name: str, default: bool) -> bool:
    """Return the variable read as a boolean (1/0, true/false, yes/no, on/off)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), not {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    """Return the variable read as an integer, at least `minimum` when given."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    """Return the variable read as a number, at least `minimum` when given."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {raw!r}") from None
    if not math.isfinite(value):  # "nan" passes any minimum, "inf" means never
        raise ImproperlyConfigured(f"{name} must be a finite number, not {raw!r}")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    """Return the variable read as a comma-separated list of at least one item."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    items = [item.strip() for item in raw.split(",") if item.strip()]
    if not items:
        shown = ",".join(default)
        raise ImproperlyConfigured(f"{name} is set but names nothing: unset it for {shown}")
    return items


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """Return the variable if it is one of `choices` (in any case), written as they are."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    by_upper = {choice.upper(): choice for choice in choices}
    if raw.strip().upper() not in by_upper:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, not {raw!r}")
    return by_upper[raw.strip().upper()]


def env_url(name: str, default: str) -> str:
    """Return the variable if it is an http:// or https:// URL naming a host."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        parts = urlsplit(raw.strip())
        usable = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018  (raises for a port that is not a number)
    except ValueError:  # that, or brackets that do not close
        usable = False
    if not usable:
        raise ImproperlyConfigured(f"{name} must be an http:// or https:// URL, not {raw!r}")
    return raw.strip()


def env_zone(name: str, default: str) -> str:
    """Return the variable if it names a time zone the machine knows (Europe/London)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        zoneinfo.ZoneInfo(raw.strip())
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ImproperlyConfigured(
            f"{name} must name a time zone such as Europe/London or UTC, not {raw!r}"
        ) from None
    return raw.strip()
