"""Studio page routes (all of them require a signed-in person)."""

from django.urls import URLPattern, path, register_converter

from studio import thumbs
from studio.web.views import batches, images, results, sets, subjects


class RowId:
    """A row id: at most 18 digits, so no id in a URL overflows the database's integer, and
    no leading zero, so a page has one address ("/subjects/01/" was subject 1's too)."""

    regex = "[1-9][0-9]{0,17}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(RowId, "rowid")

app_name = "studio"

urlpatterns: list[URLPattern] = [
    path("", batches.home, name="home"),
    path("subjects/", subjects.subjects, name="subjects"),
    path("subjects/<rowid:subject_id>/", subjects.subject_detail, name="subject"),
    path("subjects/<rowid:subject_id>/rename/", subjects.subject_rename, name="subject-rename"),
    path("subjects/<rowid:subject_id>/remove/", subjects.subject_remove, name="subject-remove"),
    path(
        "subjects/<rowid:subject_id>/photos/<rowid:asset_id>/rename/",
        subjects.photo_rename,
        name="photo-rename",
    ),
    path(
        "subjects/<rowid:subject_id>/photos/<rowid:asset_id>/remove/",
        subjects.photo_remove,
        name="photo-remove",
    ),
    path("batches/new/", batches.batch_new, name="batch-new"),
    path("batches/<uuid:batch_id>/", batches.batch_detail, name="batch"),
    path("batches/<uuid:batch_id>/progress/", batches.batch_progress, name="batch-progress"),
    path("batches/<uuid:batch_id>/results/", results.batch_results, name="batch-results"),
    path("batches/<uuid:batch_id>/cancel/", batches.batch_cancel, name="batch-cancel"),
    path("tasks/<uuid:task_id>/cancel/", batches.task_cancel, name="task-cancel"),
    path("gallery/", sets.gallery, name="gallery"),
    path("sets/", sets.sets, name="sets"),
    path("sets/<rowid:set_id>/", sets.set_detail, name="set"),
    path("sets/<rowid:set_id>/rename/", sets.set_rename, name="set-rename"),
    path("sets/<rowid:set_id>/delete/", sets.set_delete, name="set-delete"),
    path("sets/<rowid:set_id>/publish/", sets.set_publish, name="set-publish"),
    path("sets/<rowid:set_id>/published/", sets.set_published, name="set-published"),
    path("assets/<rowid:asset_id>/", results.asset_detail, name="asset"),
    path("assets/<rowid:asset_id>/download/", images.asset_download, name="asset-download"),
    path("assets/<rowid:asset_id>/add-to-set/", sets.add_to_set, name="asset-add-to-set"),
    # The rendering is in the URL: a browser keeps a thumbnail for a year without asking.
    path(
        f"assets/<rowid:asset_id>/thumb/<int:size>/v{thumbs.RENDERING}/",
        images.asset_thumb,
        name="asset-thumb",
    ),
    # A page from before a new rendering (a tab left open) still gets its picture.
    path("assets/<rowid:asset_id>/thumb/<int:size>/", images.thumb_moved),
    path("assets/<rowid:asset_id>/thumb/<int:size>/v<int:rendering>/", images.thumb_moved),
    path("assets/<rowid:asset_id>/original/", images.asset_original, name="asset-original"),
]
