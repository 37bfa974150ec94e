"""The Django admin: see exactly where every task is, and repair what needs a person.

Thin by design: every repair is an action that calls the same service as the rest of
Avatars (`studio.engine`) and reports what it did. One module per model admin; what
they share (read-only by default, versioned edits) is in `base.py`, how things are
shown in `display.py`, and the worker's status on the index is the `{% worker_status %}`
tag (`studio/templatetags/studio_admin.py`).
"""

from django.contrib import admin

# Importing the modules registers their admins with the site.
from studio.admin import (  # noqa: F401
    assets,
    attempts,
    batches,
    heartbeats,
    scrubs,
    sets,
    subjects,
    tasks,
    tokens,
)

admin.site.site_header = "Avatars administration"
admin.site.site_title = "Avatars admin"
admin.site.index_title = "Inspect and repair"
