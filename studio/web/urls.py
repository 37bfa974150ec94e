"""Studio page routes (all of them require a signed-in person)."""

from django.urls import URLPattern, path, register_converter

from studio.web import views


class RowId:
    """A row id: at most 18 digits, so no id in a URL overflows the database's integer."""

    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(RowId, "rowid")

app_name = "studio"

urlpatterns: list[URLPattern] = [
    path("", views.home, name="home"),
    path("subjects/", views.subjects, name="subjects"),
    path("subjects/<rowid:subject_id>/", views.subject, name="subject"),
    path("batches/new/", views.batch_new, name="batch-new"),
    path("batches/<uuid:batch_id>/", views.batch, name="batch"),
    path("batches/<uuid:batch_id>/progress/", views.batch_progress, name="batch-progress"),
    path("batches/<uuid:batch_id>/cancel/", views.batch_cancel, name="batch-cancel"),
    path("tasks/<uuid:task_id>/cancel/", views.task_cancel, name="task-cancel"),
    path("gallery/", views.gallery, name="gallery"),
    path("sets/", views.sets, name="sets"),
    path("sets/<rowid:set_id>/", views.avatar_set, name="set"),
    path("sets/<rowid:set_id>/publish/", views.set_publish, name="set-publish"),
    path("sets/<rowid:set_id>/published/", views.set_published, name="set-published"),
    path("assets/<rowid:asset_id>/thumb/<int:size>/", views.asset_thumb, name="asset-thumb"),
    path("assets/<rowid:asset_id>/original/", views.asset_original, name="asset-original"),
]
