"""Seed a demo install: a login, two subjects with drawn reference photos, one sample batch."""

import secrets
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction

from studio import engine
from studio.drawing import Picture, render_png
from studio.models import Batch, Origin, Subject

DEMO_USER = "demo"
DEMO_SUBJECTS = ("Ada", "Bo")


@dataclass(frozen=True)
class Seeded:
    username: str
    password: str
    batch: Batch | None  # the sample batch, when this run planned it


def seed_demo() -> Seeded:
    """Create (or refresh) the demo login and seed data; safe to run again.

    The password is new and random on every run: a demo login must never have a
    well-known password. The subjects are seeded while there are none, and the sample
    batch is planned while there is none, so running the demo twice does not pay for
    it twice (nor bring back Ada once she is renamed).
    """
    password = secrets.token_urlsafe(12)
    with transaction.atomic():
        user, _ = User.objects.get_or_create(username=DEMO_USER)
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
    # The first run's only: subjects renamed, emptied or removed since are not made again.
    if Subject.objects.exists():
        with_photos = Subject.objects.filter(assets__origin=Origin.UPLOADED).distinct()
        subjects = list(with_photos.order_by("pk")[:2])
    else:
        subjects = [_subject(name) for name in DEMO_SUBJECTS]
    batch = None
    if subjects and not Batch.objects.exists():
        batch = engine.generate(
            request={
                "title": "Sample avatars",
                "prompt": "a friendly portrait, watercolour",
                "subjects": [s.pk for s in subjects],
                "providers": [
                    {"provider": "openai", "candidates": 2},
                    {"provider": "flux", "candidates": 1},
                ],
                "frames": ["image", "clip"],
            },
            user=user,
        )
    return Seeded(username=DEMO_USER, password=password, batch=batch)


def _subject(name: str) -> Subject:
    subject = Subject.objects.filter(name=name).first() or engine.create_subject(name=name)
    # Its generated images are its assets too; only an upload is a reference photo.
    if not subject.assets.filter(origin=Origin.UPLOADED).exists():
        photo = render_png(
            Picture(
                seed=f"reference-{name}",
                provider=name,
                frame="reference photo",
                candidate="",
                stamp="demo",
            ),
            size=384,
        )
        engine.add_reference(subject=subject, data=photo, file_name=f"{name.lower()}.png")
    return subject
