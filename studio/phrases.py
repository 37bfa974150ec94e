"""The sentences a task carries that several layers write or read, each said once.

The worker, a restore and the services write them; the studio's pages and the admin
recognise them. Those quoted from the contract are word for word.
"""

# A `copy_failed` task's phase when Ember's file route said 404: a reconcile asks again,
# and helps only if Ember has the image back. Its page says what a person can do.
GONE_PHASE = (
    "Ember says it no longer has this image; a reconcile copies it only if Ember has it back"
)
# What can still bring such a task's original in: the admin's and the reconcile command's.
GONE_REMEDY = (
    "it is copied only if Ember has it back, or from the archive once its file is put back "
    "there (check_originals --repair --from-backup SRC, from a backup that holds it); check "
    "its image id with Ember."
)
# What the admin says when such a task's copy is retried: it is tried again all the same.
GONE_ADVICE = f"Ember had said it no longer has this image: {GONE_REMEDY}"
# The phase of a task planned, or put back, to be sent by the worker in its turn. The
# batch page says it in the words of the moment (`progress.turn_words`).
QUEUED_PHASE = "Waiting for the worker"
# The phase of a `copying` task (the worker's, and a reconcile's that hands one back);
# a failed try adds which it was and why.
COPYING_PHASE = "Copying the original from Ember"
# The phase of an `uncertain` task: a person (or the history search) finds out first.
RECONCILE_PHASE = "Reconcile before retry"
# A task's error when a frozen reference no longer matches (the contract's sentence):
# nothing of it was sent, so once the photo is repaired a person may queue it again.
REFERENCE_CHANGED = "A frozen reference failed its checksum."
# What a task that may have reached Ember says (the contract's sentence): the worker's
# and a restore's.
MAY_HAVE_REACHED = (
    "The previous submit may have reached Ember. Check history before submitting again."
)
# An uncertain image's phase when Ember's history has no row for its lost submit: the
# worker's search, which looks again, and a reconcile that finds the same.
NO_ROW_PHASE = "Ember's history has no row for this submit yet; the worker looks again"
# Once any job sent then would have finished (the poll bound). Not "likely never reached
# Ember": a job whose history write failed leaves no row either, and was paid for (a kill
# review resubmitted on that advice and paid twice).
NO_ROW_LATE_PHASE = (
    "No row in Ember's history long after its job would have finished: the submit may never "
    "have arrived, its job may have failed, or Ember did not write its row. A person decides "
    "whether to resubmit"
)
# The start of reconcile's note of paid originals of a task it did not take, left protected
# in Ember. A task keeps it once done: nothing else says those originals are there (a
# review's `done` had wiped it), and a later reconcile only adds what it did not name yet.
LEFT_IN_EMBER = "Ember's history also holds "


def left_in_ember(error: str) -> str:
    """Return the note of other paid originals in a task's `error`; "" when it has none."""
    start = error.find(LEFT_IN_EMBER)
    end = error.find("does not release ", start)
    if start < 0 or end < 0:
        return ""
    return error[start : error.find(".", end) + 1]


# The start of the phase of a task whose last request could not reach Ember (a poll, a
# send tried again later): the batch page says Ember is away above the rows.
UNREACHABLE = "Ember could not be reached"
# A job Ember accepted and has not ended: the phase `running` starts with, and is given
# back once a poll is answered again after a trouble (a review's batch page said "Ember
# could not be reached" for the rest of a long job after Ember was back).
GENERATING_PHASE = "Ember is generating"
# A task that waits because Ember refused our credentials (401/403): a queued one's phase,
# and a copy's (`worker/credentials.py`), which a worker started anew makes due at once.
AUTH_PHASE = "Ember refused our credentials; check EMBER_TOKEN"
# How a phase says the worker tries again by itself, after a refusal that proves nothing
# was accepted: Ember's own words beside it ("retry later") read as if the person had to
# (a review). The batch page drops it from the row and says when instead.
RETRIES_ITSELF = "; will try again"
# A task Ember turned away as busy: the start of its phase, which the batch page notes
# above the rows too.
BUSY = "Ember is busy"
BUSY_PHASE = BUSY + RETRIES_ITSELF
UNREACHABLE_PHASE = UNREACHABLE + RETRIES_ITSELF
