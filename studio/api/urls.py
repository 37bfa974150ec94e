"""JSON API routes (docs/api.md), under `/api/v1/`. Ids are taken as text and looked up by `find`,
so that a malformed id is a JSON 404 like any unknown one."""

from django.urls import URLPattern, path, re_path

from studio.api import views

app_name = "api"

urlpatterns: list[URLPattern] = [
    path("subjects", views.subjects, name="subjects"),
    path("subjects/<str:subject_id>/references", views.references, name="references"),
    path("batches", views.batches, name="batches"),
    path("batches/<str:batch_id>", views.batch, name="batch"),
    path("batches/<str:batch_id>/cancel", views.batch_cancel, name="batch-cancel"),
    path("tasks/<str:task_id>", views.task, name="task"),
    path("tasks/<str:task_id>/cancel", views.task_cancel, name="task-cancel"),
    path("tasks/<str:task_id>/reconcile", views.task_reconcile, name="task-reconcile"),
    path("assets/<str:asset_id>", views.asset, name="asset"),
    path("assets/<str:asset_id>/original", views.asset_original, name="asset-original"),
    path("sets", views.sets, name="sets"),
    path("sets/<str:set_id>", views.avatar_set, name="set"),
    path("sets/<str:set_id>/publish", views.set_publish, name="set-publish"),
    # Last: any other path under /api/v1/ answers in JSON, not with the HTML 404 page.
    re_path(r"", views.not_found, name="not-found"),
]
