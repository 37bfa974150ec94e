"""Reading a batch request into a plan, or refusing it with a sentence (docs/design.md §5).

Nothing here writes: `validate` reads the subjects, reference photos and the provider
catalogue, and checks the request against the caps.
"""

import json
import unicodedata
from typing import Any

from django.conf import settings

from studio import ids as ids_module
from studio import names
from studio.engine.errors import InvalidRequest
from studio.models import Asset, Origin, Subject

FRAMES = ("image", "headshot", "full-body", "clip")
MAX_CANDIDATES = 8  # per provider, however a request splits them over its models
MAX_PROMPT = 4000
MAX_TITLE = 200
MAX_SUBJECTS = 100  # subjects one batch names: a family's, with room to spare
MAX_LISTED = 1000  # items of a list of reference photos read at all
UNSHOWN = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")  # said back as escapes, as JSON may
REQUEST_FIELDS = ("title", "prompt", "subjects", "references", "providers", "frames")
PROVIDER_FIELDS = ("provider", "candidates", "model")
TITLE_CUT = 80  # characters of the prompt a batch without a title is named by
ECHOED = 100  # characters of a caller's own value said back in a refusal, the ellipsis included
NO_PHOTOS_OF_SUBJECTS = (
    "The subjects have no reference photos yet: upload a photo of them before planning a batch."
)
NO_PHOTOS_CHOSEN = "Choose at least one reference photo."


def text_or_none(value: object, refusal: str) -> str | None:
    """Return `value` when it is text or absent (None); refuse anything else with `refusal`.

    A name, a prompt or a model of another type (`1`, `[]`) is told what it must be, not
    that it is empty (a review's).
    """
    if value is not None and not isinstance(value, str):
        raise InvalidRequest(refusal)
    return value


def _prompt(value: object) -> str:
    """Return the prompt trimmed, or InvalidRequest: not text, empty or too long."""
    value = text_or_none(value, "The prompt must be text.")
    if value is None or not value.strip():
        raise InvalidRequest("The prompt must not be empty.")
    prompt = value.strip()
    if len(prompt) > MAX_PROMPT:
        raise InvalidRequest(f"The prompt is too long (at most {MAX_PROMPT} characters).")
    # A prompt nothing of which shows (a zero-width space, an override) is empty too: it
    # would be paid for, and a person would see a blank where it should be (a review's).
    if not names.cleaned(prompt):
        raise InvalidRequest("The prompt must not be empty.")
    return prompt


def _title_from(prompt: str) -> str:
    """Return a batch's title made of its prompt's start: a name, at most TITLE_CUT long.

    It is cleaned as any name is (a review's prompt gave a title with a bell and a
    direction override in it), and cut between two things that show (`names.cut`). A
    prompt longer than that is cut after a word where one ends in its second half, and
    ends in "…" (a review read a title cut mid-phrase as the whole of it).
    """
    whole = names.cleaned(prompt)
    if len(whole) <= TITLE_CUT:
        return whole
    start = names.cut(whole, TITLE_CUT - 1)
    words = start[: start.rfind(" ")].rstrip(" ,;:.-") if " " in start else ""
    return f"{words if len(words) > TITLE_CUT // 2 else start}\u2026"


def validate(request: object) -> dict[str, Any]:
    """Return the plan for `request` (its tasks, and the request to store), or InvalidRequest."""
    if not isinstance(request, dict):
        raise InvalidRequest("The request must be a JSON object.")
    _known(request, REQUEST_FIELDS, "A batch")
    prompt = _prompt(request.get("prompt"))
    title = text_or_none(request.get("title"), "The title must be text.")
    title = names.cleaned(title) or _title_from(prompt)  # none, or none that shows
    if len(title) > MAX_TITLE:
        raise InvalidRequest(f"The title is too long (at most {MAX_TITLE} characters).")
    subjects = _subjects(request.get("subjects"))
    references = _references(request.get("references"), subjects)
    providers = _providers(request.get("providers"))
    frames = _frames(request.get("frames"))
    total = sum(p["candidates"] for p in providers) * len(frames)
    limit = settings.AVATARS_MAX_TASKS_PER_BATCH
    if total > limit:
        raise InvalidRequest(
            f"This batch would make {total} tasks; the limit is {limit}.", field="providers"
        )
    subject_ids = [s.pk for s in subjects]
    return {
        "title": title,
        "prompt": prompt,
        "subjects": subject_ids,
        "references": references,
        "providers": providers,
        "frames": frames,
        "tasks": total,
        "request": {
            "title": title,
            "prompt": prompt,
            "subjects": subject_ids,
            "references": [r["asset"] for r in references],
            "providers": [
                {"provider": p["provider"], "model": p["model"], "candidates": p["candidates"]}
                for p in providers
            ],
            "frames": frames,
        },
    }


def echo(value: object) -> str:
    """Return `value` as a refusal says it back: written as JSON, cut to ECHOED characters.

    Every refusal that quotes a caller's value says it through here (the API's 404 for an
    id included). The caller wrote JSON or a URL, so `null`, `true` and `"openai"` read
    back as written, not as Python's None, True and 'openai' (a review found those). A
    character that does not show (a control, a direction override) is written as its
    escape, so the refusal shows it and it cannot reorder the sentence around it. A
    caller's mistake may be megabytes long (a model's name, a frame, an id in a URL);
    the refusal only needs to show which value it was.
    """
    try:
        said = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # not JSON's, or an int past Python's digits limit
        said = f"a {type(value).__name__} too long to show" if isinstance(value, int) else "?"
    said = "".join(
        f"\\u{ord(char):04x}" if unicodedata.category(char) in UNSHOWN else char for char in said
    )
    return said if len(said) <= ECHOED else said[: ECHOED - 1] + "…"


def id_list(value: object, what: str, *, most: int) -> list[int]:
    """Return the distinct ids in `value`: whole numbers or ASCII digit strings, nothing else.

    An id no row can have (0, or past the database's range) is kept, so that the caller
    answers "Unknown ..." for it; only `existing_ids` ids are ever put to the database.
    More than `most` items are refused before anything is asked of the database (whose
    parameters per query are bounded).
    """
    if not isinstance(value, list):
        raise InvalidRequest(f"{what} must be a list of ids.")
    if len(value) > most:
        raise InvalidRequest(f"{what} may name at most {most} ids, not {len(value)}.")
    ids = []
    for item in value:
        if not ids_module.looks_like_id(item):
            raise InvalidRequest(f"{what} must be a list of ids; {echo(item)} is not one.")
        ids.append(int(item))
    return list(dict.fromkeys(ids))


def existing_ids(ids: list[int]) -> list[int]:
    """Drop ids no row can have, so the database is never asked about them."""
    return [i for i in ids if ids_module.row_id(i) is not None]


def _subjects(value: object) -> list[Subject]:
    """Return the subjects `value` names, in its order; at least one, every one known."""
    ids = id_list(value if value is not None else [], "Subjects", most=MAX_SUBJECTS)
    if not ids:
        raise InvalidRequest("Choose at least one subject.")
    found = {s.pk: s for s in Subject.objects.filter(pk__in=existing_ids(ids))}
    missing = [i for i in ids if i not in found]
    if missing:
        raise InvalidRequest(f"Unknown subject: {echo(missing[0])}.")
    return [found[i] for i in ids]


def _references(value: object, subjects: list[Subject]) -> list[dict[str, Any]]:
    """Freeze the reference photos `value` names, or (when absent) every one of `subjects`."""
    uploaded = Asset.objects.filter(origin=Origin.UPLOADED)
    if value is None:
        assets = list(uploaded.filter(subjects__in=subjects).distinct().order_by("pk"))
    else:
        # The cap on photos is judged below, on the distinct ones found.
        ids = id_list(value, "References", most=MAX_LISTED)
        found = {a.pk: a for a in uploaded.filter(pk__in=existing_ids(ids))}
        missing = [i for i in ids if i not in found]
        if missing:
            if Asset.objects.filter(pk__in=existing_ids(missing[:1])).exists():
                raise InvalidRequest(
                    f"Asset {echo(missing[0])} is a result, not a reference photo: a batch "
                    "sends only uploaded photos."
                )
            raise InvalidRequest(f"Unknown reference photo: {echo(missing[0])}.")
        # A photo taken off every subject is kept only for the sets and batches using it.
        removed = uploaded.filter(pk__in=found, subjects__isnull=True)
        gone = set(removed.values_list("pk", flat=True))
        if gone:
            first = next(i for i in ids if i in gone)
            raise InvalidRequest(
                f"Reference photo {first} was removed from its subjects; it is not sent again.",
                field="references",
            )
        assets = [found[i] for i in ids]
    if not assets:
        # An avatar is made from photos: without one Ember would be paid for a stranger.
        raise InvalidRequest(
            NO_PHOTOS_OF_SUBJECTS if value is None else NO_PHOTOS_CHOSEN, field="references"
        )
    _check_reference_caps(assets, every_photo=value is None)
    # Frozen now: the worker re-hashes each file and refuses one that changed.
    return [
        {"asset": a.pk, "sha256": a.sha256, "name": a.file_name, "mime": a.mime} for a in assets
    ]


def _check_reference_caps(assets: list[Asset], *, every_photo: bool) -> None:
    """Refuse more photos, or more bytes of them, than every task of the batch may send."""
    limit = settings.AVATARS_MAX_REFERENCES
    if len(assets) > limit:
        which = " (every photo of its subjects)" if every_photo else ""
        raise InvalidRequest(
            f"This batch would send {len(assets)} reference photos{which}; the limit is {limit}.",
            field="references",
        )
    total, most = sum(a.size for a in assets), settings.AVATARS_MAX_REFERENCE_BYTES
    if total > most:
        raise InvalidRequest(
            f"The reference photos come to {_bytes(total)}; the limit is {_bytes(most)}.",
            field="references",
        )


def _bytes(size: int) -> str:
    """Say `size` exactly, with mebibytes beside it once it is that large."""
    mib = 1024 * 1024
    return f"{size:,} bytes" + (f" ({size / mib:.1f} MiB)" if size >= mib else "")


def _providers(value: object) -> list[dict[str, Any]]:
    """Read the `providers` rows, refusing a repeated row or too many candidates per provider."""
    if value is not None and not isinstance(value, list):
        raise InvalidRequest(
            "Providers must be a list of providers, each an object with a provider name."
        )
    if not value:
        raise InvalidRequest("Choose at least one provider.")
    providers: list[dict[str, Any]] = []
    for entry in value:
        provider = _provider(entry)
        name, model = provider["provider"], provider["model"]
        if any(p["provider"] == name and p["model"] == model for p in providers):
            # Its default model named or not, it is the same row (a review read it as a bug).
            raise InvalidRequest(
                f"Provider {echo(name)} is listed twice with the model {echo(model)}: "
                "give its candidates in one row."
            )
        providers.append(provider)
    # Rows of one provider split by model still spend that provider's candidates.
    for name in dict.fromkeys(p["provider"] for p in providers):
        count = sum(p["candidates"] for p in providers if p["provider"] == name)
        if count > MAX_CANDIDATES:
            raise InvalidRequest(
                f"Provider {echo(name)} has {count} candidates across its rows; "
                f"the limit is {MAX_CANDIDATES} per provider.",
                field="providers",
                provider=name,
            )
    return providers


def _known(given: dict[Any, Any], fields: tuple[str, ...], what: str) -> None:
    """Refuse a field `fields` does not name: a misspelt one would be planned without, and
    paid for as planned (a review's `"extra": 1` was taken in silence)."""
    unknown = [key for key in given if key not in fields]
    if unknown:
        raise InvalidRequest(
            f"Unknown field: {echo(unknown[0])}. {what} takes {', '.join(fields)}."
        )


def _provider(entry: object) -> dict[str, Any]:
    """Read one row of `providers`: a provider of the catalogue, one of its models, candidates."""
    catalogue = settings.AVATARS_PROVIDERS
    if not isinstance(entry, dict):
        raise InvalidRequest("Each provider must be an object with a provider name.")
    _known(entry, PROVIDER_FIELDS, "A provider")
    name = entry.get("provider")
    if not isinstance(name, str) or name not in catalogue:
        raise InvalidRequest(f"Unknown provider: {echo(name)}.")
    candidates = entry.get("candidates", 1)
    if isinstance(candidates, float) and candidates.is_integer() and abs(candidates) < 2**31:
        candidates = int(candidates)  # 2.0 is JSON Schema's integer as 2 is (a review)
    if isinstance(candidates, bool) or not isinstance(candidates, int):
        raise InvalidRequest("Candidates must be a whole number.")
    if not 1 <= candidates <= MAX_CANDIDATES:
        raise InvalidRequest(f"Candidates must be between 1 and {MAX_CANDIDATES}.")
    default = catalogue[name].get("model") or ""
    model = text_or_none(entry.get("model") or default, "A provider's model must be text.")
    models = _provider_models(name)
    if model and model not in models:
        known = ", ".join(models) or "none"
        raise InvalidRequest(
            f"Unknown model for provider {echo(name)}: {echo(model)}. Its models are {known}.",
            field="providers",
            provider=name,
        )
    return {
        "provider": name,
        "label": catalogue[name]["label"],
        "model": model,
        "candidates": candidates,
    }


def _provider_models(name: str) -> list[str]:
    """Return the models a batch may name for provider `name`: its default model first."""
    entry = settings.AVATARS_PROVIDERS[name]
    models = [entry.get("model") or "", *entry.get("models", [])]
    return [m for m in dict.fromkeys(models) if m]


def _frames(value: object) -> list[str]:
    """Return the distinct frames `value` names, in its order; at least one, every one known.

    None (absent, or null as any optional field may be) is the default, `["image"]`.
    """
    if value is None:
        return ["image"]
    if not isinstance(value, list):
        raise InvalidRequest(f"The frames must be a list of these: {', '.join(FRAMES)}.")
    if not value:
        raise InvalidRequest("Choose at least one frame.")
    for frame in value:
        if frame not in FRAMES:
            raise InvalidRequest(f"Unknown frame: {echo(frame)}. Frames are {', '.join(FRAMES)}.")
    return list(dict.fromkeys(value))
