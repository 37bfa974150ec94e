"""ASGI entry point for Avatars: Django behind a door that refuses oversized bodies unread."""

import os
import sys

from django.core.asgi import get_asgi_application
from django.core.exceptions import ImproperlyConfigured

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "avatars.settings")
try:
    django_application = get_asgi_application()
except ImproperlyConfigured as exc:
    # The server stops with the sentence manage.py gives, not a traceback through it.
    sys.exit(f"Avatars cannot start: {exc}")

from avatars.bodylimit import BodyLimit  # needs the apps loaded above
from studio import heap, restoring

try:
    # A half-restored install served pages over half its rows (found by a review).
    restoring.unfinished()
except restoring.RestoreUnfinished as exc:
    sys.exit(f"Avatars cannot start: {exc}")

heap.give_back_large_blocks()  # decoded images' memory goes back when freed (studio/heap.py)
application = BodyLimit(django_application)
