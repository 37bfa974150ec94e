"""Forms for the studio pages: every section checked at once; the services have the last word."""

import secrets
from collections.abc import Iterable
from typing import Any

from django import forms
from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db.models import Exists, OuterRef

from studio import engine, uploads
from studio.ids import row_id
from studio.models import Asset, Batch, Origin, Subject


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
        return uploads.take(upload), upload.name or ""


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


COUNT_DIGITS = 9  # a typed count longer than this is read as 10**9: over every limit
FORM_EXPIRED = "This form has expired; reload the page and submit it again."
NO_PROVIDER = "Choose at least one provider."


def count_jobs(candidates: Iterable[int], frames: Iterable[str]) -> int:
    """Count the paid Ember jobs a batch makes: every candidate of every provider, per frame."""
    return sum(n for n in candidates if n > 0) * len({f for f in frames if f in engine.FRAMES})


def _digits(value: Any) -> int | None:
    """Read a typed count as the page's script does: ASCII digits, else None."""
    text = str(value if value is not None else "").strip()
    if not (text.isascii() and text.isdigit()):
        return None
    # int() refuses more than 4,300 digits (a review's 5,000 were a 500): past any limit.
    return int(text) if len(text.lstrip("0")) <= COUNT_DIGITS else 10**COUNT_DIGITS


def _whole(value: Any) -> int:
    """Read a typed candidate count as the page's script does: not a number counts as 0."""
    return _digits(value) or 0


class CountField(forms.IntegerField):
    """A candidate count: ASCII digits only, an empty box 0 (as the page's script counts).

    Django's IntegerField also takes "3.0", "+3" or a full-width 3: the button, counting as the
    script does, named 0 jobs for those while 3 were planned. Whatever this field takes,
    `_whole` reads as the same number, so the button names what is planned.
    """

    default_error_messages = {
        "invalid": "Enter a whole number, like 2 (0 leaves it out).",
        # Django's own ("Ensure this value is less than or equal to 8.") read as a form's
        # talk, not the studio's (a review).
        "max_value": "At most %(limit_value)s candidates a provider.",
        "min_value": "Enter a whole number, like 2 (0 leaves it out).",
    }

    def to_python(self, value: Any) -> int | None:
        if str(value if value is not None else "").strip() == "":
            return 0
        count = _digits(value)
        if count is None:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return count


class BatchForm(forms.Form):
    """A new batch: one prompt, subjects and their photos, providers x frames x candidates.

    Each rendered form carries a one-time token: posting it twice (a double click, or
    Back and submit again) plans one batch, because the token is the batch's
    idempotency key. Every section is checked before the form answers, so that every
    error shows at once beside its section.
    """

    token = forms.RegexField(
        regex=r"^[A-Za-z0-9_-]{16,64}$",
        widget=forms.HiddenInput,
        error_messages={"required": FORM_EXPIRED, "invalid": FORM_EXPIRED},
    )
    title = forms.CharField(max_length=200, required=False)
    prompt = forms.CharField(max_length=engine.MAX_PROMPT, widget=forms.Textarea(attrs={"rows": 3}))
    subjects = RowChoiceField(
        queryset=Subject.objects.all(), widget=forms.CheckboxSelectMultiple, required=False
    )
    references = ReferenceChoiceField(
        queryset=Asset.objects.filter(origin=Origin.UPLOADED).prefetch_related("subjects"),
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="Leave all unticked to use every photo of the chosen subjects.",
    )
    # Never rendered: it holds what is said about the providers as a whole.
    providers = forms.Field(required=False, widget=forms.HiddenInput)
    frames = forms.MultipleChoiceField(
        choices=[(frame, frame) for frame in engine.FRAMES],
        widget=forms.CheckboxSelectMultiple,
        initial=["image"],
        required=False,
    )
    # The person's second word: the number of paid jobs they agreed to start, and that
    # they mean to start the same batch again.
    confirm_jobs = forms.IntegerField(required=False, min_value=0, widget=forms.HiddenInput)
    again = forms.BooleanField(required=False, label="Start it again on purpose")
    # The batch whose failed images this form asks for again (its link filled it in).
    again_of = forms.ModelChoiceField(
        queryset=Batch.objects.all(), required=False, widget=forms.HiddenInput
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A new one each time the form is rendered empty; a posted form keeps its own.
        self.fields["token"].initial = secrets.token_urlsafe(24)
        for key, entry in settings.AVATARS_PROVIDERS.items():
            # Every provider starts at 0: nothing is paid for that the person did not ask.
            self.fields[f"candidates_{key}"] = CountField(
                label=entry["label"],
                required=False,
                min_value=0,
                max_value=engine.MAX_CANDIDATES,
                initial=0,
                help_text=entry.get("model", ""),
                widget=forms.NumberInput(attrs={"class": "candidates"}),
            )
        self.fields["frames"].widget.attrs["class"] = "frame"
        self.twin: Batch | None = None  # a batch this person planned just now that this repeats
        self.twin_ago = ""  # when it was planned, in words
        self.twin_same = True  # the same batch, not one repeating only some of its images

    def provider_fields(self) -> list[forms.BoundField]:
        return [self[f"candidates_{key}"] for key in settings.AVATARS_PROVIDERS]

    def problems(self) -> list[tuple[str, str, str]]:
        """Return (the id of the field's first box, its label, an error) for each error, in
        the form's order: the summary at the top links each to its field (a review)."""
        found = []
        for field in self:
            if field.name == "providers":  # a hidden field: its boxes are the counts
                anchor = self.provider_fields()[0].id_for_label
            else:  # a list of ticks labels none of its boxes: the first is the way in
                anchor = field.id_for_label or f"{field.auto_id}_0"
            found += [(anchor, str(field.label), str(error)) for error in field.errors]
        return found

    def subjects_without_photos(self) -> set[int]:
        """Return the ids of the subjects that have no reference photo yet."""
        photos = Asset.objects.filter(origin=Origin.UPLOADED, subjects=OuterRef("pk"))
        return set(Subject.objects.filter(~Exists(photos)).values_list("pk", flat=True))

    def job_factors(self) -> tuple[int, int]:
        """Return the candidates (over every provider) and frames the form asks for, as typed."""
        providers = settings.AVATARS_PROVIDERS
        if not self.is_bound:  # as filled in (asking a batch's failed images again), or empty
            asked = sum(int(self.initial.get(f"candidates_{k}") or 0) for k in providers)
            return asked, len(self.initial.get("frames", self.fields["frames"].initial))
        candidates = sum(max(0, _whole(self.data.get(f"candidates_{k}"))) for k in providers)
        getlist = getattr(self.data, "getlist", None)
        frames = getlist("frames") if getlist else self.data.get("frames") or []
        return candidates, len({f for f in frames if f in engine.FRAMES})

    def paid_jobs(self) -> int:
        """Count the paid jobs the form asks for, as typed (the page's script counts alike)."""
        candidates, frames = self.job_factors()
        return candidates * frames

    def asks_to_confirm(self) -> bool:
        """Say whether this many paid jobs need the person's second word before planning."""
        jobs = self.paid_jobs()
        agreed = self.cleaned_data.get("confirm_jobs") if hasattr(self, "cleaned_data") else None
        return jobs > settings.AVATARS_CONFIRM_JOBS_ABOVE and agreed != jobs

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "subjects" in data and not data["subjects"]:
            self.add_error("subjects", "Choose at least one subject.")
        if not data.get("frames") and "frames" not in self.errors:
            self.add_error("frames", "Choose at least one frame.")
        self._check_providers(data)
        self._check_photos(data)
        return data

    def _check_providers(self, data: dict[str, Any]) -> None:
        typed = [data.get(f"candidates_{key}") for key in settings.AVATARS_PROVIDERS]
        asked = [n for n in typed if n is not None]
        if len(asked) < len(typed):
            return  # a count is wrong: said beside it
        if not any(asked):
            self.add_error("providers", NO_PROVIDER)
            return
        total, limit = (
            count_jobs(asked, data.get("frames") or []),
            settings.AVATARS_MAX_TASKS_PER_BATCH,
        )
        if total > limit:
            self.add_error(
                "providers", f"This batch would make {total} tasks; the limit is {limit}."
            )

    def _check_photos(self, data: dict[str, Any]) -> None:
        """Refuse photos of unticked subjects, and ticked subjects without any photo."""
        ticked = list(data.get("subjects") or [])
        without = self.subjects_without_photos() if ticked else set()
        bare = [s.name for s in ticked if s.pk in without]
        if bare:
            self.add_error(
                "subjects",
                f"{_names(bare)} {'has' if len(bare) == 1 else 'have'} no reference photos yet: "
                "add some on the Subjects page, or untick "
                f"{'it' if len(bare) == 1 else 'them'}.",
            )
        ids = {s.pk for s in ticked}
        stray = [
            a.file_name
            for a in data.get("references") or []
            if not ids & {s.pk for s in a.subjects.all()}
        ]
        if stray:
            self.add_error(
                "references",
                f"{_names(stray)} {'is a photo' if len(stray) == 1 else 'are photos'} of no "
                "ticked subject: tick the subject or untick the photo.",
            )

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
        return "providers"  # the batch as a whole is too large

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


def _names(names: list[str]) -> str:
    """Say a list of names as "A", "A and B" or "A, B and C"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


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
