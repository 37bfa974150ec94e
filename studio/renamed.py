"""An original found under another name (docs/operations.md, the originals scrub).

A file moved or renamed by hand within originals/ (`cp`, a file manager, a sync tool)
leaves its original "missing" and a file "no row" names beside it. Before asking Ember
(which may have let go of its copy since) or a backup, the scrub hashes the files no row
names, and a repair copies the original's bytes back into its place from the one that
holds them. That file stays as it was, for a person to remove.
"""

import os
from collections.abc import Iterator
from pathlib import Path

from studio import originals
from studio.findings import CORRUPT, MISSING, NO_ROW, Finding

# Files looked at inside the folders no row names, at most, in all: a photo library copied
# into originals/ by mistake must not cost a read of each of its files.
WALK_MOST = 10_000


def match(findings: list[Finding], folder: Path) -> None:
    """Say, for each missing or corrupt original, a file no row names holding its bytes.

    Only when something is missing or corrupt are those files read (each once, within the
    image cap, regular files only), in the folders no row names too (to any depth, links
    not followed, at most `WALK_MOST` files there), until every one is found.
    """
    wanted = {f.sha256: f for f in findings if f.kind in (MISSING, CORRUPT) and f.sha256}
    unsearched: list[Finding] = []  # the folders the walk stopped in, or never reached
    strays = [f for f in findings if f.kind == NO_ROW]
    for stray, path in _candidates(strays, folder, unsearched):
        if not wanted:
            return
        try:
            damaged = wanted.pop(originals.sha256_of(originals.read_regular(path)), None)
        except (originals.NotAnOriginal, OSError):
            continue
        if damaged is None:
            continue
        damaged.found_as = path
        damaged.detail += f"; its bytes are in {shown(path)}, a file no row names"
        said = f"the bytes of {damaged.name}, which is {damaged.kind}"
        if path.name != stray.name:  # in a folder: it may hold several
            said = f"{shown(path)} holds {said}"
        stray.detail = "; ".join(part for part in (stray.detail, said) if part)
    if wanted and unsearched:
        _say_unsearched(list(wanted.values()), unsearched)


def _say_unsearched(damaged: list[Finding], unsearched: list[Finding]) -> None:
    """Say that the walk stopped before every folder no row names was searched: a review's
    repair sent the operator to a backup while the original's bytes were in such a folder."""
    names = ", ".join(f.name for f in unsearched)
    for finding in unsearched:
        finding.detail = "; ".join(
            part
            for part in (finding.detail, f"not searched in full ({WALK_MOST:,} entries at most)")
            if part
        )
    for finding in damaged:
        finding.detail += (
            f"; the walk through folders no row names stopped at {WALK_MOST:,} entries "
            f"before searching all of {names}: its bytes may be there"
        )


def _candidates(
    strays: list[Finding], folder: Path, unsearched: list[Finding]
) -> Iterator[tuple[Finding, Path]]:
    """Yield each stray file as (its finding, its path), then the files in stray folders.

    The plain files first, all of them: a large folder listed before a renamed original
    must not use up the walk's budget before it (a re-review). In the folders, every entry
    counts against `WALK_MOST`, folders too (a deep tree of empty ones is no free walk).
    The folders the walk stops in, or does not reach, go into `unsearched`.
    """
    folders = []
    for stray in strays:
        path = folder / stray.name
        if path.is_symlink() or not path.is_dir():
            yield stray, path
        else:
            folders.append((stray, path))
    walked = 0
    for at, (stray, path) in enumerate(folders):
        for root, dirs, files in os.walk(path):  # a link to a folder is not walked into
            walked += len(dirs)
            dirs.sort()
            for name in sorted(files):
                walked += 1
                if walked > WALK_MOST:
                    break
                yield stray, Path(root) / name
            if walked > WALK_MOST:
                unsearched.extend(found for found, _ in folders[at:])
                return


def shown(path: Path) -> str:
    """Name a file as within originals/: "ada (copy).png", "sorted/2026/ada.png"."""
    try:
        return str(path.relative_to(originals.originals_dir()))
    except ValueError:
        return str(path)


def put_back(finding: Finding) -> tuple[bool, str] | None:
    """Copy the original back into its place from the file found holding its bytes.

    None when there is none, or it no longer holds them: the other repairs are tried.
    """
    if finding.found_as is None:
        return None
    try:
        data = originals.read_regular(finding.found_as)
        originals.put_back(data, sha256=finding.sha256, mime=finding.mime)
    except (originals.ChecksumFailed, originals.NotAnImage, originals.NotAnOriginal, OSError):
        return None
    return True, (
        f"copied back from {shown(finding.found_as)}, a file no row names holding its bytes "
        "(left as it is: remove it once you have checked)"
    )
