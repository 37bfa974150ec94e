"""Settings for the test suite: the project's own, with DEBUG turned on.

DEBUG is off unless `DJANGO_DEBUG` says otherwise; the tests (and the processes they
start, which inherit this environment) run with it on, as `make demo` does. Tests of the
production defaults set `DJANGO_DEBUG=false` themselves.
"""

import os

os.environ.setdefault("DJANGO_DEBUG", "true")

from avatars.settings import *  # noqa: F403
