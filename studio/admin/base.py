"""What every studio admin shares: look by default, write only what a person may change.

Everything the worker or the services own is read-only here. A model admin names the
few fields a person may edit (`editable`); those are written with a versioned update,
so an edit made while the worker moved the row is refused, never silently written over
the worker's change.
"""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import flatten_fieldsets
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from studio.store import Conflict, update

STALE_EDIT = (
    "This row changed while you were editing it (another person or the worker changed it). "
    "Reload and try again."
)


class StudioAdmin(admin.ModelAdmin):
    """Show a model to inspect: no add, no delete, every field read-only but `editable`.

    Rows are created and removed by the services, the worker and the studio pages; a
    person here looks, repairs through actions, and edits at most what `editable` names.
    """

    editable: tuple[str, ...] = ()  # the fields of the change page a person may edit

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # From the declared fields, not get_fieldsets(): without declared fields Django
        # derives them from the form, which asks for these read-only fields first.
        shown = flatten_fieldsets(self.fieldsets) if self.fieldsets else self.fields or ()
        return [str(name) for name in shown if name not in self.editable]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = dict(extra_context or {})
        if not self.editable:  # nothing to save: the page is for looking and repairing
            context = {"show_save": False, "show_save_and_continue": False, **context}
        return super().change_view(request, object_id, form_url, extra_context=context)


class RecordAdmin(StudioAdmin):
    """Show records to look at only: the worker or the services write every one."""

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class VersionedForm(forms.ModelForm):
    """Carry the version the form was rendered with, so saving can insist on it."""

    loaded_version = forms.IntegerField(widget=forms.HiddenInput, min_value=1)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["loaded_version"].initial = self.instance.version


class VersionedAdmin(StudioAdmin):
    """Write only the fields a person changed, and only over the version they saw.

    The worker may move a row while its change page is open. Saving then raises
    `Conflict` from the versioned update; the change view refuses the edit with
    STALE_EDIT and rolls back its transaction (no log entry, no inline saves).
    """

    form = VersionedForm

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = list(super().get_fieldsets(request, obj))
        named = flatten_fieldsets(fieldsets)
        if "loaded_version" not in named and fieldsets:
            name, options = fieldsets[0]
            fields = [*options["fields"], "loaded_version"]
            fieldsets[0] = (name, {**options, "fields": fields})
        return fieldsets

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change:
            super().save_model(request, obj, form, change)
            return
        columns = {f.name for f in obj._meta.concrete_fields}
        changed = {name: form.cleaned_data[name] for name in form.changed_data if name in columns}
        if changed:
            update(obj, expected=form.cleaned_data["loaded_version"], **changed)
        elif form.cleaned_data["loaded_version"] != obj.version:
            # Nothing left to write, maybe because the move made a field read-only (a set
            # published meanwhile keeps its name): the edit is refused, not said to be saved.
            raise Conflict()

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except Conflict:
            self.message_user(request, STALE_EDIT, messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())


class ReadOnlyInline(admin.TabularInline):
    """An inline to look at, never to edit through."""

    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
