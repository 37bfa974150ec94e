"""ASGI entry point for Avatars: Django behind a door that refuses oversized bodies unread."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "avatars.settings")
django_application = get_asgi_application()

from avatars.bodylimit import BodyLimit  # noqa: E402  (needs the apps loaded above)

application = BodyLimit(django_application)
