"""check_originals on an originals folder it may not read (a disk's permissions gone wrong):
each original and the folder said in a line, no traceback. Run as the install's own user
would: as root, with the capabilities that pass over permissions dropped (`setpriv`).
"""

import os
import shutil
import sys

import pytest

from tests.processes import Stack

pytestmark = pytest.mark.e2e

STORE = (
    "from studio import originals\n"
    "from studio.models import Asset\n"
    "from tests.factories import png_bytes\n"
    "for n in (1, 2):\n"
    "    Asset.objects.create_stored(originals.save(png_bytes(n)), file_name=f'{n}.png')\n"
    "result = originals.originals_dir().as_posix()"
)
NO_OVERRIDE = "-dac_override,-dac_read_search"


def as_the_install(*argv: str) -> list[str]:
    """Return `argv` run without root's pass over file permissions (when root)."""
    if os.geteuid() != 0:
        return list(argv)
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to drop root's pass over permissions"
    return [setpriv, "--bounding-set", NO_OVERRIDE, "--inh-caps", NO_OVERRIDE, "--", *argv]


def test_an_originals_folder_it_may_not_read_is_said_in_lines_not_a_traceback(stack: Stack):
    """Found by a review: a 51-line PermissionError traceback, then a closed database's."""
    folder = stack.django(STORE)
    os.chmod(folder, 0)
    try:
        done = stack.run(*as_the_install(sys.executable, "manage.py", "check_originals"))
        repair = as_the_install(sys.executable, "manage.py", "check_originals", "--repair")
        repaired = stack.run(*repair)
    finally:
        os.chmod(folder, 0o700)

    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "Traceback" not in said, said
    assert said.count("(could not be read: Permission denied") == 2, said
    assert f"The folder {folder} could not be listed (Permission denied)" in said, said
    said = repaired.stdout + repaired.stderr
    assert repaired.returncode == 1 and "Traceback" not in said, said
