"""Names people give things are text someone can read (studio/names.py)."""

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from studio import curation, engine, names
from studio.engine import InvalidRequest
from studio.models import Subject
from tests.factories import png_bytes

pytestmark = pytest.mark.django_db


@given(st.text(max_size=40))
def test_a_name_keeps_what_shows_and_never_a_control_that_reorders_text(text):
    name = names.cleaned(text)

    assert not set(name) & {chr(c) for c in names.BIDI_CONTROLS | names.SPACERS}
    assert not [c for c in name if unicodedata.category(c) in names.BREAKS], repr(name)
    shows = [c for c in name if unicodedata.category(c) not in names.UNSEEN]
    assert bool(name) == bool(shows), repr(name)
    assert names.cleaned(name) == name, repr(name)  # a name, cleaned again, stays itself
    if name:  # nothing but the controls, the spacers and the ends' blanks went
        kept = unicodedata.normalize("NFC", text.translate(names.BIDI_CONTROLS | names.SPACERS))
        spaced = "".join(" " if unicodedata.category(c) in names.BREAKS else c for c in kept)
        assert name in spaced, repr(name)
        assert unicodedata.normalize("NFC", name) == name
        for end in (name[0], name[-1]):
            assert not end.isspace() and unicodedata.category(end) not in ("Cf", "Zs")


@given(
    st.text(min_size=1, max_size=20),
    st.lists(st.sampled_from(["\u200b", "\u2060", "\ufeff", "\u200d", " ", "\u00a0"])),
)
def test_what_does_not_show_at_a_names_ends_changes_nothing(text, unseen):
    """Found by a review: "Holiday" and "Holiday" with a zero-width space were two names."""
    padding = "".join(unseen)

    assert names.cleaned(padding + text + padding) == names.cleaned(text)


def test_a_name_typed_decomposed_is_the_name_typed_composed():
    assert names.cleaned("Cafe\u0301") == names.cleaned("Caf\u00e9") == "Caf\u00e9"


def test_a_family_emoji_keeps_its_joiners_and_an_override_goes():
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"

    subject = engine.create_subject(name=f"\u202eOur {family}\u200d\u200b")

    assert subject.name == f"Our {family}"
    assert Subject.objects.get().name == f"Our {family}"


@pytest.mark.parametrize("unseen", ["\u200b", "\u202e\u200d", "\u2066 \u2069", "\u0301"])
def test_a_set_and_a_rename_need_a_name_that_shows(unseen, make_subject):
    with pytest.raises(InvalidRequest, match=r"A set needs a name\."):
        engine.create_set(name=unseen, asset_ids=[])
    with pytest.raises(InvalidRequest, match=r"A subject needs a name\."):
        curation.rename_subject(subject=make_subject("Ada"), name=unseen)


@pytest.mark.parametrize(
    ("given", "kept"),
    [("\u0007bell", "bell"), ("a\nb", "a b"), ("a\r\nb", "a  b"), ("a\u2028b", "a b")],
)
def test_a_name_shows_no_bell_and_no_line_break(given, kept):
    """Found by a review: the API kept a bell and new lines in names and titles."""
    assert engine.create_subject(name=given).name == kept


@pytest.mark.parametrize("unseen", ["\u200b", "\u202e\u200b", "\ufeff", "\u0301", "\x07"])
def test_a_prompt_that_shows_nothing_is_empty_and_nothing_is_planned(unseen, make_subject):
    """Found by a review: a prompt of a zero-width space was planned, sent and paid for."""
    subject = make_subject("Ada")
    request = {
        "prompt": unseen,
        "subjects": [subject.pk],
        "providers": [{"provider": "openai", "candidates": 1}],
    }

    with pytest.raises(InvalidRequest, match=r"^The prompt must not be empty\.$"):
        engine.generate(request=request)


@pytest.mark.parametrize(
    ("prompt", "title"),
    [
        ("a\u0007b\u202eevil", "a bevil"),
        # Cut at 79 characters, then "…" (a longer prompt's title says it was cut).
        ("x" * 78 + "e\u0301 and more", "x" * 78 + "\u00e9\u2026"),
        ("x" * 78 + "\U0001f468\u200d\U0001f469 and more", "x" * 78 + "\u2026"),
        ("x" * 77 + "\U0001f44b\U0001f3fd and more", "x" * 77 + "\U0001f44b\U0001f3fd\u2026"),
        ("x" * 78 + "\U0001f44b\U0001f3fd and more", "x" * 78 + "\u2026"),
    ],
)
def test_a_batch_named_by_its_prompt_gets_a_name_cut_between_letters(prompt, title, subject):
    """Found by a review: a prompt's start kept a bell and a direction override in the
    batch's title, and its cut at 80 characters could take an accent off its letter."""
    request = {
        "prompt": prompt,
        "subjects": [subject.pk],
        "providers": [{"provider": "openai", "candidates": 1}],
    }

    assert engine.generate(request=request).title == title


@pytest.mark.parametrize("value", [1, True, [], {}, ["Ada"]])
def test_a_name_or_a_prompt_of_another_type_is_told_it_must_be_text(value, subject):
    """Found by a review: `{"name": 1}` was told "A subject needs a name."."""
    request = {"prompt": value, "subjects": [subject.pk], "providers": [{"provider": "openai"}]}
    for call, sentence in [
        (lambda: engine.create_subject(name=value), "A subject's name must be text."),
        (
            lambda: curation.rename_subject(subject=subject, name=value),
            "A subject's name must be text.",
        ),
        (lambda: engine.create_set(name=value, asset_ids=[]), "A set's name must be text."),
        (lambda: engine.generate(request=request), "The prompt must be text."),
    ]:
        with pytest.raises(InvalidRequest) as refused:
            call()
        assert str(refused.value) == sentence


def test_a_photos_file_name_is_kept_as_a_name_without_controls_or_overrides(subject):
    """Django's upload parser drops them; a photo added any other way went unchecked."""
    asset = engine.add_reference(
        subject=subject, data=png_bytes(5), file_name="\u202eab\u0007c.png"
    )

    assert asset.file_name == "ab c.png"


@given(
    st.text(min_size=1, max_size=300),
    st.sampled_from([".png", ".jpeg", ".webp", ""]),
    st.integers(min_value=20, max_value=255),
)
def test_a_file_name_cut_to_fit_keeps_its_extension(stem, extension, most):
    """Found by a hostile-files review: a 300-character "….png" was stored cut to 255
    characters, without its ".png"."""
    name = names.file_name(stem + extension, most)

    assert len(name) <= most, len(name)
    assert names.cleaned(name) == name, repr(name)
    whole = names.cleaned(stem + extension)
    if len(whole) <= most:
        assert name == whole
    elif extension and names.cleaned(stem) and whole.endswith(extension):
        assert name.endswith(extension), repr(name)


def test_a_renamed_photo_keeps_its_extension_and_loses_its_controls(subject):
    photo = engine.add_reference(subject=subject, data=png_bytes(6), file_name="a.png")

    renamed = curation.rename_photo(photo=photo, file_name="\u202e" + "n\u0007" * 200 + ".png")

    assert len(renamed.file_name) == 255 and renamed.file_name.endswith("n n.png")
