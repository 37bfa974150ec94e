"""The originals scrub (docs/operations.md): re-hash every original, report, repair.

`check` reads each file the asset rows name once (in chunks, rows streamed in hash
order, so memory stays flat however many originals there are), then walks originals/
for files no row names and temporary files a dead write left. A symbolic link in an
original's place is a problem even to the right bytes: the archive must hold them itself.
`repair` puts a missing or corrupt original back: from the file such a link points to,
from a backup folder, or (a generated one) from Ember; only bytes that hash to the saved
sha256 are written, through the store (fsync). An upload has no copy in Ember. A folder in
an original's place is left alone: a person moves it aside first.
"""

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from itertools import groupby
from pathlib import Path

from django.utils import timezone

from studio import findings, leftovers, originals, renamed
from studio.ember.client import EmberClient
from studio.ember.errors import EmberBadAnswer, EmberError, EmberNotFound, EmberRejected
from studio.findings import (
    CORRUPT,
    FOLDER,
    MISSING,
    NO_ROW,
    TEMPORARY,
    UNCOPIED,
    UNCOPIED_MANY,
    Finding,
)
from studio.models import Asset, Origin, ScrubReport, Task, TaskState
from studio.phrases import GONE_PHASE

SHOWN_IDS = 5  # asset ids named per problem line; the rest are counted
ROWS_PER_FETCH = 2000  # rows read from the database at a time
# Ember's answers that will not change: the image is gone, or its bytes are not the original.
EMBER_SAYS_NO = (EmberNotFound, EmberRejected, EmberBadAnswer)

# A row as read: (sha256, mime, pk, origin, ember_image_id).
Row = tuple[str, str, int, str, str]


@dataclass
class Scrub:
    """What one scrub found: counts, and every problem in the order met."""

    started_at: datetime
    repair: bool = False
    checked: int = 0
    findings: list[Finding] = field(default_factory=list)
    folder_gone: Path | None = None  # the originals folder itself, when it is not there
    # Or there and holding none of several originals: the mount point of a disk not mounted.
    folder_empty: bool = False
    unlisted: str = ""  # why the folder could not be listed for files no row names

    def count(self, kind: str) -> int:
        return sum(1 for f in self.findings if f.kind == kind)

    def damaged(self) -> list[Finding]:
        return [f for f in self.findings if f.kind in (MISSING, CORRUPT)]

    @property
    def repaired(self) -> int:
        return sum(1 for f in self.findings if f.repaired)

    @property
    def unrepaired(self) -> int:
        return sum(1 for f in self.findings if f.repaired is False)

    @property
    def passed(self) -> bool:
        """Say whether every original the rows name is there and whole (after repairs)."""
        return all(f.repaired for f in self.damaged())

    def lines(self) -> list[str]:
        """Return one line per problem, then one per repair tried."""
        tried = [f.repair_line() for f in self.findings if f.repaired is not None]
        return [f.line() for f in self.findings] + tried

    @property
    def folder_state(self) -> str:
        """Say what is wrong with the originals folder as a whole (with `folder_gone`)."""
        return "holds none of its originals" if self.folder_empty else "itself is not there"

    def summary(self) -> str:
        noun = "original" if self.checked == 1 else "originals"
        counts = [
            plural(self.count(MISSING), "missing", "missing"),
            plural(self.count(CORRUPT), "corrupt", "corrupt"),
            plural(self.count(NO_ROW), "file with no row", "files with no row"),
            plural(self.count(TEMPORARY), "temporary file", "temporary files"),
            plural(self.count(UNCOPIED), "task's original not copied", UNCOPIED_MANY),
        ]
        found = ", ".join(c for c in counts if c) or "all present and matching their hashes"
        repairs = [f"repaired {self.repaired}"] if self.repaired else []
        repairs += [f"{self.unrepaired} not repaired"] if self.unrepaired else []
        tail = f"; {', '.join(repairs)}" if repairs else ""
        gone = ""
        if self.folder_gone is not None:
            gone = (
                f" The folder {self.folder_gone} {self.folder_state} (a disk not mounted?): "
                "put it back before repairing its files one by one."
            )
        if self.unlisted:
            gone += f" The folder {self.unlisted}: files no row names were not looked for."
        return f"Checked {self.checked} {noun}: {found}{tail}.{gone}"


def plural(count: int, one: str, many: str) -> str:
    return "" if not count else f"{count} {one if count == 1 else many}"


def check() -> Scrub:
    """Re-hash every original the asset rows name; find files no row names and temp files."""
    scrub = Scrub(started_at=timezone.now())
    rows = (
        Asset.objects.order_by("sha256", "mime")
        .values_list("sha256", "mime", "pk", "origin", "ember_image_id")
        .iterator(chunk_size=ROWS_PER_FETCH)
    )
    # Rows sharing bytes share one file: each file is hashed once, with its rows in hand.
    for (sha256, mime), group in groupby(rows, key=lambda row: (row[0], row[1])):
        scrub.checked += 1
        finding = check_original(sha256, mime, list(group))
        if finding is not None:
            scrub.findings.append(finding)
    folder = originals.originals_dir()
    try:
        scrub.findings.extend(strays(folder))
    except OSError as exc:  # a folder it may not read: each file said so above, no traceback
        scrub.unlisted = f"{folder} could not be listed ({exc.strerror or exc})"
    renamed.match(scrub.findings, folder)
    renamed_all = all(f.found_as for f in scrub.damaged())  # every one there, named otherwise
    if scrub.checked and not folder.is_dir():
        scrub.folder_gone = folder  # every file missing at once: most likely not mounted
    elif scrub.checked > 1 and scrub.count(MISSING) == scrub.checked and not renamed_all:
        # There, but holding none of them: a mount point too, whatever else it holds (a
        # sentinel file, a temporary one: a review's repair filled one from Ember).
        scrub.folder_gone, scrub.folder_empty = folder, True
    scrub.findings.extend(uncopied({f.path: f for f in scrub.damaged() if f.path is not None}))
    return scrub


def uncopied(damaged: dict[Path, Finding]) -> Iterator[Finding]:
    """Yield the originals of tasks whose copy failed because Ember no longer has the image,
    that the archive does not hold whole: a backup may (`--repair --from-backup`).

    One already found missing or corrupt (`damaged`, by its place: an asset row names it
    too) is one file, not two: that finding names the task as well (a review counted it
    twice, once each way).
    """
    failed = Task.objects.filter(state=TaskState.COPY_FAILED, phase=GONE_PHASE)
    for task in failed.only("pk", "result").iterator(chunk_size=ROWS_PER_FETCH):
        image = task.saved("image")
        sha256, mime = image.get("sha256"), image.get("mime")
        try:
            path = originals.path_of(str(sha256), str(mime))
        except ValueError:
            continue  # an answer that names no file: nothing here can bring it back
        if originals.held_for(sha256, mime) is not None:
            continue  # whole in the archive (under any type): the task's next copy takes it
        said = f"Ember no longer has image {image.get('id')}, and the archive does not hold it"
        found = damaged.get(path)
        if found is not None:
            found.detail += f"; it is also the original of task {task.pk}: {said}"
            found.task = found.task or str(task.pk)
            continue
        yield Finding(
            UNCOPIED,
            path.name,
            f"the original of task {task.pk}: {said}",
            sha256=str(sha256),
            mime=str(mime),
            path=path,
            task=str(task.pk),
        )


def check_original(sha256: str, mime: str, rows: list[Row]) -> Finding | None:
    """Return what is wrong with the file these rows name, or None when it is whole."""
    named_by = describe_rows(rows)
    try:
        path = originals.path_of(sha256, mime)
    except ValueError:
        return Finding(MISSING, f"{sha256}?", f"the row's hash or type names no file; {named_by}")
    wrong = look(path, sha256)
    if wrong is None:
        return None
    kind, what = wrong
    finding = Finding(kind, path.name, f"{what}; {named_by}", sha256=sha256, mime=mime, path=path)
    finding.image_ids = [r[4] for r in rows if r[3] == Origin.GENERATED and r[4]]
    finding.uploaded = all(r[3] == Origin.UPLOADED for r in rows)
    return finding


def look(path: Path, sha256: str) -> tuple[str, str] | None:
    """Return the kind of problem with the original at `path` and what it is, or None.

    A symbolic link is a problem even to the right bytes: the archive does not hold them,
    and the original is lost the day the file it points to is moved or deleted.
    """
    folder = False
    try:
        target = link_target(path)
    except OSError:  # not a link (or nothing there: `look_at_file` says so)
        with contextlib.suppress(OSError):  # a folder it may not look into: said below
            folder = path.is_dir()
        if folder:
            # Nothing can be renamed over a folder: no repair works until a person moves it.
            return CORRUPT, f"{FOLDER}: move it aside, then run check_originals --repair"
        return look_at_file(path, sha256)
    link = f"a symbolic link to {target}"
    wrong = look_at_file(path, sha256)  # through the link
    if wrong is None:
        return CORRUPT, (
            f"{link}, not a file of its own; if {target} goes, the original goes with it"
        )
    kind, what = wrong
    if kind == MISSING:  # a dangling link: the original is gone already
        return MISSING, f"{link}, which is not there"
    return kind, f"{link}: {what}"


def link_target(path: Path) -> str:
    """Return where the symbolic link at `path` points, from the root (OSError if no link)."""
    return os.path.normpath(path.parent / os.readlink(path))


def look_at_file(path: Path, sha256: str) -> tuple[str, str] | None:
    """Return the kind of problem with the file at `path` (links followed), or None."""
    try:
        # Looked at before it is opened: a pipe or a device in its place would hang the check.
        if originals.sha256_of(originals.read_regular(path)) == sha256:
            return None
        return CORRUPT, "hashes to another value"
    except FileNotFoundError:
        return MISSING, "no file"
    except originals.NotAnOriginal as exc:
        return CORRUPT, str(exc)
    except OSError as exc:
        return CORRUPT, f"could not be read: {exc.strerror or exc}"


def describe_rows(rows: list[Row]) -> str:
    """Say which asset rows name a file ("named by generated asset 12")."""
    origins = sorted({row[3] for row in rows})
    ids = [str(row[2]) for row in rows[:SHOWN_IDS]]
    more = f" and {len(rows) - SHOWN_IDS} more" if len(rows) > SHOWN_IDS else ""
    noun = "asset" if len(rows) == 1 else "assets"
    return f"named by {'/'.join(origins)} {noun} {', '.join(ids)}{more}"


def strays(directory: Path) -> Iterator[Finding]:
    """Yield the files under `directory` no row names, and the temporary files in it."""
    if not directory.is_dir():
        return
    known = {ext: mime for mime, ext in originals.FORMATS.values()}
    with os.scandir(directory) as entries:
        for entry in entries:
            name = entry.name
            if leftovers.lost_and_found(Path(entry.path)):
                continue  # what mkfs makes at the root of a disk mounted here: no stray
            if leftovers.temporary(name):
                yield temporary(entry)
                continue
            stem, dot, ext = name.partition(".")
            mime = known.get(f"{dot}{ext}")
            if mime is None or not Asset.objects.filter(sha256=stem, mime=mime).exists():
                yield Finding(NO_ROW, name)


def temporary(entry: os.DirEntry[str]) -> Finding:
    try:
        age = time.time() - entry.stat().st_mtime
    except FileNotFoundError:  # the write it belonged to has just finished
        age = 0
    minutes = int(age // 60)
    if age < leftovers.STALE_AFTER:
        why = "may be a write in progress"
    else:
        why = f"the worker removes those older than {leftovers.STALE_AFTER // 60} minutes at start"
    return Finding(TEMPORARY, entry.name, f"{minutes} minutes old; {why}")


def repair(scrub: Scrub, *, backup: Path | None = None) -> None:
    """Put each missing or corrupt original back: from `backup`'s folder if given, else Ember.

    A backup holds uploaded photos too; Ember only the generated originals it still has.
    """
    scrub.repair = True
    if backup is not None:
        for finding in scrub.findings:
            if finding.kind == UNCOPIED:
                try:
                    finding.repaired, finding.outcome = from_backup_as_any_type(finding, backup)
                except findings.ArchiveRefused as exc:  # no later backup would do better
                    finding.repaired, finding.outcome = False, str(exc)
                    continue
                finding.outcome += (
                    f"; reconcile task {finding.task} to finish its copy"
                    if finding.repaired
                    else ": try a later backup, or the lost install's originals/"
                )
    damaged = scrub.damaged()
    if not damaged:
        return
    # One event loop for every fetch: the client's connections belong to it.
    with asyncio.Runner() as runner:
        client = EmberClient()
        try:
            for finding in damaged:
                try:
                    outcome = repair_finding(finding, backup, runner, client)
                except OSError as exc:  # its folder may not be looked into, say (a review's)
                    outcome = False, f"its place could not be looked at: {exc.strerror or exc}"
                finding.repaired, finding.outcome = outcome
                if finding.repaired and finding.task:
                    finding.outcome += f"; reconcile task {finding.task} to finish its copy"
        finally:
            runner.run(client.aclose())


def repair_finding(
    finding: Finding, backup: Path | None, runner: asyncio.Runner, client: EmberClient
) -> tuple[bool, str]:
    """Put one original back, the cheapest safe way first; return whether it worked and how.

    From the file a link in its place points to, or one no row names holding its bytes
    (renamed.py), then from `backup`, then from Ember.
    """
    path = finding.path
    if path is not None and is_folder(path):
        # Renaming the bytes over it fails, and it may hold someone's files: a person moves it.
        again = f" --from-backup {backup}" if backup is not None else ""
        return False, (
            f"{FOLDER}, left as it is (it may hold someone's files): move it aside, "
            f"then run check_originals --repair{again} again"
        )
    found = from_link(finding, path) if path is not None and path.is_symlink() else None
    found = found or renamed.put_back(finding)
    if found is not None:
        return found
    if backup is None:
        return repair_one(finding, runner, client)
    try:
        put, said = from_backup(finding, backup)
    except findings.ArchiveRefused as exc:  # it would refuse Ember's copy as well
        return False, str(exc)
    if put or not finding.image_ids:
        return put, said
    return repair_one(finding, runner, client, instead=said)  # Ember may still have it


def from_link(finding: Finding, path: Path) -> tuple[bool, str] | None:
    """Copy into the archive the bytes the link at `path` points to, if they are the original.

    The store's rename replaces the link itself, not the file it points to (left as it is).
    None when those bytes are gone or not the original's: the other repairs are tried.
    """
    try:
        target = link_target(path)
        # Through the link: only a regular file within the image cap is read.
        data = originals.read_regular(path)
        originals.put_back(data, sha256=finding.sha256, mime=finding.mime)
    except (originals.ChecksumFailed, originals.NotAnImage, originals.NotAnOriginal, OSError):
        return None
    return True, f"copied into the archive from {target}, the file the link pointed to"


def from_backup(finding: Finding, backup: Path) -> tuple[bool, str]:
    """Put one original back from a backup folder; say whether it worked, and how or why not.

    findings.ArchiveRefused goes to the caller: the backup is not to blame, and neither
    another backup nor Ember would get past the archive.
    """
    try:
        findings.put_back(finding, originals.read_regular(backup / "originals" / finding.name))
    except FileNotFoundError:
        return False, f"not in the backup {backup} either"
    except (
        originals.ChecksumFailed,
        originals.NotAnImage,
        originals.NotAnOriginal,
        OSError,
    ) as exc:
        return False, f"corrupt in the backup {backup}: {exc}"
    return True, f"put back from the backup {backup}"


def from_backup_as_any_type(finding: Finding, backup: Path) -> tuple[bool, str]:
    """Put a task's original back from a backup under whichever type names it there, the
    type Ember said first: a backup names a file by what its bytes are."""
    said: list[str] = []
    for mime, extension in originals.said_first(finding.mime):
        named = replace(finding, name=f"{finding.sha256}{extension}", mime=mime)
        put, outcome = from_backup(named, backup)
        if put:
            finding.name, finding.mime = named.name, mime
            return put, outcome
        said.append(outcome)
    missing = f"not in the backup {backup} either"
    return False, next((why for why in said if why != missing), missing)


def repair_one(
    finding: Finding, runner: asyncio.Runner, client: EmberClient, *, instead: str = ""
) -> tuple[bool, str]:
    """Put one original back from Ember; return whether it worked and what happened.

    A backup is the advice only when Ember said no; when it could not be asked (unreachable,
    busy, refusing our token), asking again later may still bring the original back.
    `instead`: why the backup named could not put it back, said before another is advised.
    """
    if not finding.image_ids:
        if finding.uploaded:
            return False, "an uploaded photo: Ember has no copy; restore it from a backup"
        return False, "no row names an Ember image to fetch; restore it from a backup"
    refusals = []
    unasked = False
    for image_id in dict.fromkeys(finding.image_ids):
        try:
            data, _type = runner.run(client.fetch(image_id, sha256=finding.sha256))
            findings.put_back(finding, data)
        except EmberNotFound:
            refusals.append(f"Ember no longer has image {image_id}")
        except EmberError as exc:
            unasked = unasked or not isinstance(exc, EMBER_SAYS_NO)
            refusals.append(f"{exc.message.rstrip('.')} (image {image_id})")
        except findings.ArchiveRefused as exc:
            return False, f"fetched from Ember, image {image_id}, but {exc}"
        except (originals.ChecksumFailed, originals.NotAnImage, OSError) as exc:
            refusals.append(f"{exc} (image {image_id})")
        else:
            return True, f"fetched again from Ember, image {image_id}"
    if unasked:
        advice = "run check_originals --repair again when Ember answers"
    elif instead:
        advice = f"{instead}: restore it from another backup"
    else:
        advice = "restore it from a backup"
    return False, "; ".join([*refusals, advice])


def backup_refusal(src: Path) -> str | None:
    """Say why `src` is not a backup folder a repair can read originals from; None if it is."""
    folder = src / "originals"
    try:
        if not src.exists():
            return f"--from-backup {src}: there is no such folder."
        if not src.is_dir():
            return f"--from-backup {src}: not a folder."
        if not folder.is_dir():
            return f"--from-backup {src}: not a backup folder (it has no originals folder)."
        with os.scandir(folder) as entries:
            next(entries, None)
    except OSError as exc:
        return f"--from-backup {src}: its originals folder cannot be read ({exc.strerror or exc})."
    return None


def record(scrub: Scrub) -> ScrubReport:
    """Keep this scrub's result, so the admin can show the last one."""
    return ScrubReport.objects.create(
        started_at=scrub.started_at,
        finished_at=timezone.now(),
        repair=scrub.repair,
        checked=scrub.checked,
        missing=scrub.count(MISSING),
        corrupt=scrub.count(CORRUPT),
        orphans=scrub.count(NO_ROW),
        temporary=scrub.count(TEMPORARY),
        repaired=scrub.repaired,
        unrepaired=scrub.unrepaired,
        passed=scrub.passed,
        summary=scrub.summary(),
        problems=scrub.lines()[: ScrubReport.PROBLEMS_KEPT],
    )


def is_folder(path: Path) -> bool:
    """Say whether `path` is a folder (not a link to one); False where it cannot be looked at."""
    try:
        return path.is_dir() and not path.is_symlink()
    except OSError:  # a folder above it that may not be read: its repair says why
        return False
