"""Forms for the studio pages: they check the shape of what people send; services judge the rest."""

import secrets
from typing import Any

from django import forms
from django.conf import settings
from django.core.files.uploadedfile import UploadedFile

from studio import engine
from studio.ids import row_id
from studio.models import Asset, Origin, Subject


class SubjectForm(forms.Form):
    name = forms.CharField(max_length=120)
    # Sent by "Add another" once the person has seen that the name is taken.
    confirm = forms.BooleanField(required=False)


class ReferenceForm(forms.Form):
    # A plain FileField, not ImageField: the originals store decodes the file in
    # full and says precisely what is wrong with it; ImageField's check is weaker.
    photo = forms.FileField(label="Reference photo")

    def read(self) -> tuple[bytes, str]:
        """Return the upload's bytes (at most one past the size cap) and its file name."""
        upload: UploadedFile = self.cleaned_data["photo"]
        # One byte past the limit is enough for the store to refuse the file as too
        # large, without holding all of a huge upload in memory.
        return upload.read(settings.AVATARS_MAX_IMAGE_BYTES + 1), upload.name or ""


class RowChoiceField(forms.ModelMultipleChoiceField):
    """Ticked rows by id; an id no row can have is refused before the database sees it."""

    def _check_values(self, value: Any) -> Any:
        for item in value:
            if row_id(str(item)) is None:
                raise forms.ValidationError(
                    self.error_messages["invalid_pk_value"],
                    code="invalid_pk_value",
                    params={"pk": item},
                )
        return super()._check_values(value)  # type: ignore[misc]


class ReferenceChoiceField(RowChoiceField):
    def label_from_instance(self, obj: Any) -> str:
        names = ", ".join(subject.name for subject in obj.subjects.all())
        return f"{obj.file_name} ({names})" if names else str(obj.file_name)


FORM_EXPIRED = "This form has expired; reload the page and submit it again."


class BatchForm(forms.Form):
    """A new batch: one prompt, subjects and their photos, providers x frames x candidates.

    Each rendered form carries a one-time token: posting it twice (a double click, or
    Back and submit again) plans one batch, because the token is the batch's
    idempotency key.
    """

    token = forms.RegexField(
        regex=r"^[A-Za-z0-9_-]{16,64}$",
        widget=forms.HiddenInput,
        error_messages={"required": FORM_EXPIRED, "invalid": FORM_EXPIRED},
    )
    title = forms.CharField(max_length=200, required=False)
    prompt = forms.CharField(max_length=engine.MAX_PROMPT, widget=forms.Textarea(attrs={"rows": 3}))
    # Optional here: the engine answers "Choose at least one subject." in its own words.
    subjects = RowChoiceField(
        queryset=Subject.objects.all(), widget=forms.CheckboxSelectMultiple, required=False
    )
    references = ReferenceChoiceField(
        queryset=Asset.objects.filter(origin=Origin.UPLOADED).prefetch_related("subjects"),
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="Leave all unticked to use every photo of the chosen subjects.",
    )
    frames = forms.MultipleChoiceField(
        choices=[(frame, frame) for frame in engine.FRAMES],
        widget=forms.CheckboxSelectMultiple,
        initial=["image"],
        required=False,
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A new one each time the form is rendered empty; a posted form keeps its own.
        self.fields["token"].initial = secrets.token_urlsafe(24)
        for index, (key, entry) in enumerate(settings.AVATARS_PROVIDERS.items()):
            self.fields[f"candidates_{key}"] = forms.IntegerField(
                label=entry["label"],
                min_value=0,
                max_value=engine.MAX_CANDIDATES,
                initial=1 if index == 0 else 0,
                help_text=entry.get("model", ""),
                widget=forms.NumberInput(attrs={"class": "candidates"}),
            )

    def provider_fields(self) -> list[forms.BoundField]:
        return [self[f"candidates_{key}"] for key in settings.AVATARS_PROVIDERS]

    def key(self) -> str:
        """Return the idempotency key this form plans under (apart from API clients' keys)."""
        return f"form:{self.cleaned_data['token']}"

    def refuse(self, refusal: engine.InvalidRequest) -> None:
        """Show the engine's refusal beside the field that caused it, or above the form."""
        self.add_error(self._field_at_fault(refusal), str(refusal))

    def _field_at_fault(self, refusal: engine.InvalidRequest) -> str | None:
        if refusal.field == "references":
            return "references"
        if refusal.field != "providers":
            return None  # the request as a whole, the daily cap among them
        if f"candidates_{refusal.provider}" in self.fields:
            return f"candidates_{refusal.provider}"
        # The batch as a whole is too large: one sentence, beside the provider asking
        # for the most candidates (the first to lower).
        providers = settings.AVATARS_PROVIDERS
        asked = {key: self.cleaned_data.get(f"candidates_{key}") or 0 for key in providers}
        return f"candidates_{max(asked, key=asked.__getitem__)}" if asked else None

    def to_request(self) -> dict[str, Any]:
        """Build the request `engine.generate` takes from the cleaned data."""
        data = self.cleaned_data
        references = [asset.pk for asset in data["references"]]
        return {
            "title": data["title"],
            "prompt": data["prompt"],
            "subjects": [subject.pk for subject in data["subjects"]],
            # None: every photo of the chosen subjects (the engine's default).
            "references": references or None,
            "providers": [
                {"provider": key, "candidates": data[f"candidates_{key}"]}
                for key in settings.AVATARS_PROVIDERS
                if data.get(f"candidates_{key}")
            ],
            "frames": data["frames"],
        }


class IdListField(forms.Field):
    """A list of positive whole numbers (ticked checkboxes), in the order they were sent."""

    widget = forms.MultipleHiddenInput
    default_error_messages = {"invalid": "Choose assets by their ids."}

    def to_python(self, value: Any) -> list[int]:
        if not value:
            return []
        if not isinstance(value, list | tuple):
            value = [value]
        ids: list[int] = []
        for item in value:
            number = row_id(str(item))
            if number is None:
                raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
            if number not in ids:
                ids.append(number)
        return ids


EMPTY_SET = "A set needs at least one image: tick the images it should hold first."


class TickOrderField(forms.CharField):
    """The ids in the order they were ticked ("12,5,7"), kept by the page's script.

    Only a hint: anything that is not an id is skipped, and without script it is empty.
    """

    widget = forms.HiddenInput

    def to_python(self, value: Any) -> list[int]:  # type: ignore[override]
        text = super().to_python(value)
        ids = (row_id(part.strip()) for part in text.split(",")) if text else ()
        return list(dict.fromkeys(pk for pk in ids if pk is not None))


def in_tick_order(ticked: list[int], order: list[int]) -> list[int]:
    """Return `ticked` in the order they were ticked; those the order misses keep their place."""
    first = [pk for pk in order if pk in ticked]
    return first + [pk for pk in ticked if pk not in first]


class SetForm(forms.Form):
    name = forms.CharField(max_length=120)
    # Whether these assets exist is the service's question (create_set answers it).
    assets = IdListField(required=False)
    order = TickOrderField(required=False)
    # The page the ticks came from, to go back to when the set cannot be created.
    next = forms.CharField(required=False, max_length=2000)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "assets" in data and not data["assets"]:
            raise forms.ValidationError(EMPTY_SET)
        return data

    def chosen(self) -> list[int]:
        """Return the ticked asset ids in the order they were ticked."""
        return in_tick_order(self.cleaned_data["assets"], self.cleaned_data.get("order") or [])


class ChooseForm(forms.Form):
    """One change to a set's choice: add ticked assets, move one, remove one, or a new order.

    "order" carries the whole choice as dragged into place (`assets`, top first).
    """

    ACTIONS = ("add", "up", "down", "remove", "order")

    action = forms.ChoiceField(choices=[(a, a) for a in ACTIONS])
    asset = forms.IntegerField(required=False, min_value=1)
    assets = IdListField(required=False)
    order = TickOrderField(required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        action = data.get("action")
        if action == "add" and not data.get("assets"):
            raise forms.ValidationError("Tick the images to add first.")
        if action in ("up", "down", "remove") and not data.get("asset"):
            raise forms.ValidationError("Say which chosen image to change.")
        if action == "order" and not data.get("assets"):
            raise forms.ValidationError("Say the new order of the chosen images.")
        return data

    def reorder(self, chosen: list[int]) -> list[int]:
        """Return the new order of asset ids after applying this change to `chosen`."""
        action = self.cleaned_data["action"]
        ids = list(chosen)
        if action == "add":
            ticked = in_tick_order(self.cleaned_data["assets"], self.cleaned_data["order"] or [])
            return ids + [pk for pk in ticked if pk not in ids]
        if action == "order":
            # The order as dragged, of what is still chosen; anything chosen meanwhile
            # (another tab) keeps its place at the end rather than being dropped.
            return in_tick_order(ids, self.cleaned_data["assets"])
        asset = self.cleaned_data["asset"]
        if asset not in ids:
            return ids
        at = ids.index(asset)
        if action == "remove":
            del ids[at]
        elif action == "up" and at > 0:
            ids[at - 1], ids[at] = ids[at], ids[at - 1]
        elif action == "down" and at < len(ids) - 1:
            ids[at + 1], ids[at] = ids[at], ids[at + 1]
        return ids
