"""An original found under another name (docs/operations.md, the originals scrub).

A file moved or renamed by hand within originals/ (`cp`, a file manager, a sync tool)
leaves its original "missing" and a file "no row" names beside it. Before asking Ember
(which may have let go of its copy since) or a backup, the scrub hashes the files no row
names, and a repair copies the original's bytes back into its place from the one that
holds them. That file stays as it was, for a person to remove.
"""

from pathlib import Path

from studio import originals
from studio.findings import CORRUPT, MISSING, NO_ROW, Finding


def match(findings: list[Finding], folder: Path) -> None:
    """Say, for each missing or corrupt original, a file no row names holding its bytes.

    Only when something is missing or corrupt are those files read (each once, within the
    image cap, regular files only).
    """
    wanted = {f.sha256: f for f in findings if f.kind in (MISSING, CORRUPT) and f.sha256}
    if not wanted:
        return
    for stray in [f for f in findings if f.kind == NO_ROW]:
        path = folder / stray.name
        try:
            damaged = wanted.pop(originals.sha256_of(originals.read_regular(path)), None)
        except (originals.NotAnOriginal, OSError):
            continue
        if damaged is not None:
            damaged.found_as = path
            damaged.detail += f"; its bytes are in {path.name}, a file no row names"
            stray.detail = f"the bytes of {damaged.name}, which is {damaged.kind}"


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
        f"copied back from {finding.found_as.name}, a file no row names holding its bytes "
        "(left as it is: remove it once you have checked)"
    )
