"""What the originals scrub finds (studio/scrub.py): one problem with one file, and its kinds."""

from dataclasses import dataclass, field
from pathlib import Path

from studio import originals

MISSING = "missing"
CORRUPT = "corrupt"
NO_ROW = "no row"
TEMPORARY = "temporary"
UNCOPIED = "not copied"  # a task's original Ember no longer has, and the archive lacks
UNCOPIED_MANY = "tasks' originals not copied"
FOLDER = "a folder is in its place"


@dataclass
class Finding:
    """One problem with one file under originals/, and what a repair made of it."""

    kind: str
    name: str
    detail: str = ""
    sha256: str = ""
    mime: str = ""
    image_ids: list[str] = field(default_factory=list)  # Ember images with these bytes
    uploaded: bool = False  # only uploads name the file: Ember never had it
    repaired: bool | None = None  # None: no repair was tried
    outcome: str = ""
    path: Path | None = None  # where the original belongs; None when its row names none
    task: str = ""  # the task whose copy it is: for UNCOPIED, or a damaged file a task needs
    # For MISSING or CORRUPT: a file no row names that holds the original's bytes.
    found_as: Path | None = None

    def line(self) -> str:
        return f"{self.kind}: {self.name}" + (f" ({self.detail})" if self.detail else "")

    def repair_line(self) -> str:
        verdict = "repaired" if self.repaired else "not repaired"
        return f"{verdict}: {self.name} ({self.outcome})"


class ArchiveRefused(Exception):
    """The archive would not take an original a repair put back (its disk full, read-only,
    its folder not writable): the backup or Ember that had it is not to blame."""


def put_back(finding: Finding, data: bytes) -> None:
    """Put `data` back as `finding`'s original; raise ArchiveRefused when the archive refuses.

    The bytes are read by then: any error writing them is the archive's (a review's
    unwritable folder had a good backup called corrupt).
    """
    try:
        originals.put_back(data, sha256=finding.sha256, mime=finding.mime)
    except OSError as exc:
        raise ArchiveRefused(
            f"the archive's disk refused it ({exc.strerror or exc}): see to that disk, then run "
            "check_originals --repair again"
        ) from None
