"""How the worker says Ember's troubles: on a polled task's row, and for a copy's retries."""

from studio.ember.errors import EmberBusy, EmberError, EmberUnavailable, EmberUnknownOutcome
from studio.phrases import UNREACHABLE


def ember_away(exc: Exception) -> bool:
    """Say whether a fetch failed because Ember was away (unreachable, busy, or erring with a
    5xx), which passes, rather than because of the image or the disk."""
    if isinstance(exc, EmberUnavailable | EmberBusy | EmberUnknownOutcome):
        return True
    return type(exc) is EmberError and (getattr(exc, "status", None) or 0) >= 500


def poll_trouble(exc: EmberError) -> str:
    """Say on the task why a poll taught nothing: Ember not reached, its answer lost on the
    way (cut off, too slow, endless), or an answer that could not be used."""
    if isinstance(exc, EmberUnavailable):
        return f"{UNREACHABLE}; still polling"
    if isinstance(exc, EmberUnknownOutcome):
        return "Ember's answer did not arrive; still polling"
    return "Ember's answer was unusable; still polling"
