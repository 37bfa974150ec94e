"""What can go wrong when asking Ember: each error says whether the request may have arrived."""


class EmberError(Exception):
    """Ember did not give the answer we needed. `message` is for people."""

    may_have_arrived = False
    outcome = "error"  # what a request that raised it counts as (docs/operations.md §Metrics)

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class EmberUnavailable(EmberError):
    """Nothing reached Ember (connection refused, DNS, connect timeout): safe to retry."""

    outcome = "unreachable"


class EmberBusy(EmberError):
    """Ember said 429 or 503: not accepted, come back after `retry_after` seconds."""

    outcome = "busy"

    def __init__(self, message: str, *, status: int, retry_after: float) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after


class EmberAuthError(EmberError):
    """Ember refused our credentials (401/403): not accepted."""

    outcome = "refused"


class EmberRejected(EmberError):
    """Ember refused the request (another 4xx): it will not change its mind."""

    outcome = "refused"


class EmberNotFound(EmberError):
    """Ember does not know the job or image (404)."""

    outcome = "refused"


class EmberUnknownOutcome(EmberError):
    """The request was sent but no usable answer came back: it may have been applied."""

    may_have_arrived = True
    outcome = "unknown"


class EmberBadAnswer(EmberError):
    """Ember answered, but the answer makes no sense (or the bytes fail their hash)."""

    may_have_arrived = True
    outcome = "bad_answer"


class EmberUnsafeId(EmberBadAnswer):
    """Ember named a job or image with an id Avatars will not put in a URL path.

    Nothing about that job or image can be asked safely: a poll, fetch or release
    naming it is refused before anything is sent. A 202 naming one was accepted
    (and may be paid for); re-sending would only get the same id back.
    """


class EmberTooLarge(EmberBadAnswer):
    """Ember sent an image over `AVATARS_MAX_IMAGE_BYTES`: asking again gets the same bytes."""
