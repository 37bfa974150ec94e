"""Security (hardening): deploy checks, secrets, sign-in and CSRF everywhere, upload caps."""

import os
import subprocess
import sys
import uuid

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from studio import engine, uploads
from studio.api.auth import issue_token
from studio.models import ApiToken, Asset, Subject
from tests.factories import a_batch, png_bytes
from tests.processes import ROOT

REAL_SECRET = "x7Hq2-" * 12


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_deploy_checks_are_clean_with_debug_off_a_real_secret_and_hosts(tmp_path):
    done = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        AVATARS_DATA_DIR=str(tmp_path),
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY=REAL_SECRET,
        DJANGO_ALLOWED_HOSTS="avatars.example.org",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def test_deploy_checks_fail_when_a_secure_default_is_relaxed_without_a_reason(tmp_path):
    done = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        AVATARS_DATA_DIR=str(tmp_path),
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY=REAL_SECRET,
        DJANGO_ALLOWED_HOSTS="avatars.example.org",
        AVATARS_SSL_REDIRECT="false",
    )
    assert done.returncode != 0
    assert "SECURE_SSL_REDIRECT" in done.stdout + done.stderr


def test_the_dev_secret_refuses_to_run_with_debug_off(tmp_path):
    env = {"AVATARS_DATA_DIR": str(tmp_path), "DJANGO_DEBUG": "false"}
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={k: v for k, v in {**os.environ, **env}.items() if k != "DJANGO_SECRET_KEY"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "DJANGO_SECRET_KEY must be set to a real secret" in done.stderr


def without(*names: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in names}


def settings_probe(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh process with the project's own settings and `env`."""
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + code],
        cwd=ROOT,
        env={**without("DJANGO_DEBUG", "DJANGO_SECRET_KEY"), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_debug_is_off_unless_asked_for(tmp_path):
    done = settings_probe(
        "from django.conf import settings; print(settings.DEBUG, settings.SECURE_HSTS_PRELOAD)",
        DJANGO_SETTINGS_MODULE="avatars.settings",
        AVATARS_DATA_DIR=str(tmp_path),
        DJANGO_SECRET_KEY=REAL_SECRET,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]  # HSTS preload is opt-in too


@pytest.mark.parametrize("secret", ["", "short-secret", "x" * 49])
def test_an_empty_or_short_secret_refuses_to_start_with_debug_off(tmp_path, secret):
    done = settings_probe(
        "print('started')",
        DJANGO_SETTINGS_MODULE="avatars.settings",
        AVATARS_DATA_DIR=str(tmp_path),
        DJANGO_SECRET_KEY=secret,
    )

    assert done.returncode != 0 and "started" not in done.stdout
    assert "DJANGO_SECRET_KEY must be set to a real secret of at least 50 characters" in (
        done.stderr
    )
    # A newcomer running a command on the demo's data is told how (a review's).
    assert "as `make demo` runs it: DJANGO_DEBUG=true .venv/bin/python manage.py" in done.stderr


def test_a_new_data_dir_is_private_and_so_is_its_database(tmp_path):
    data_dir = tmp_path / "fresh" / "data"
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input"],
        cwd=ROOT,
        # On SQLite, whatever database the suite runs on.
        env={**without("DATABASE_URL"), "AVATARS_DATA_DIR": str(data_dir)},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    assert oct(data_dir.stat().st_mode & 0o777) == oct(0o700)
    assert oct((data_dir / "db.sqlite3").stat().st_mode & 0o777) == oct(0o600)
    for journal in data_dir.glob("db.sqlite3-*"):  # WAL and shared memory copy its mode
        assert oct(journal.stat().st_mode & 0o777) == oct(0o600), journal.name


def test_a_process_starting_as_another_creates_the_database_file_starts_too(tmp_path):
    """The web process and the worker started together on a fresh data dir both start.

    The other process's create is made to land just before this one's (the moment a
    crash was seen: FileExistsError in settings, from `make bench`'s two children).
    """
    data_dir = tmp_path / "data"
    race = (
        "import os\n"
        "real = os.open\n"
        "def open_after_the_other(path, flags, *args):\n"
        "    if str(path).endswith('db.sqlite3') and flags & os.O_EXCL:\n"
        "        os.close(real(path, os.O_WRONLY | os.O_CREAT, 0o600))  # the other process\n"
        "    return real(path, flags, *args)\n"
        "os.open = open_after_the_other\n"
        "import django\n"
        "django.setup()\n"
        "print('started')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", race],
        cwd=ROOT,
        env={
            **without("DATABASE_URL", "DJANGO_DEBUG", "DJANGO_SECRET_KEY"),
            "DJANGO_SETTINGS_MODULE": "avatars.settings",
            "AVATARS_DATA_DIR": str(data_dir),
            "DJANGO_SECRET_KEY": REAL_SECRET,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0 and done.stdout.split() == ["started"], done.stderr[-2000:]
    assert oct((data_dir / "db.sqlite3").stat().st_mode & 0o777) == oct(0o600)


@pytest.mark.parametrize(
    "path",
    [
        "/accounts/password_reset/",
        "/accounts/password_reset/done/",
        "/accounts/reset/MQ/set-password/",
        "/accounts/password_change/",
    ],
)
def test_there_are_no_password_reset_or_change_pages(client, db, path):
    assert client.get(path).status_code == 404
    assert client.post(path, {"email": "ada@example.org"}).status_code in (403, 404)


def test_a_bad_setting_value_stops_the_process_loudly(tmp_path):
    done = manage("check", AVATARS_DATA_DIR=str(tmp_path), AVATARS_WORKERS="many")
    assert done.returncode != 0
    assert "AVATARS_WORKERS must be an integer" in done.stderr


@pytest.mark.parametrize(
    ("name", "value", "sentence"),
    [
        ("AVATARS_LOG_LEVEL", "LOUD", "AVATARS_LOG_LEVEL must be one of DEBUG, INFO, WARNING"),
        ("EMBER_URL", "notaurl", "EMBER_URL must be an http:// or https:// URL, not 'notaurl'"),
        ("EMBER_URL", "ftp://ember", "EMBER_URL must be an http:// or https:// URL"),
        ("EMBER_URL", "", "EMBER_URL must be an http:// or https:// URL, not ''"),
        ("EMBER_URL", "http://ember:port", "EMBER_URL must be an http:// or https:// URL"),
        ("DATABASE_URL", "garbage", "DATABASE_URL is not a database URL"),
        ("DJANGO_ALLOWED_HOSTS", " , ", "DJANGO_ALLOWED_HOSTS is set but names nothing"),
        (
            "AVATARS_TIME_ZONE",
            "Mars/Olympus",
            "AVATARS_TIME_ZONE must name a time zone such as Europe/London or UTC, "
            "not 'Mars/Olympus'",
        ),
        ("AVATARS_TIME_ZONE", "../etc", "AVATARS_TIME_ZONE must name a time zone"),
    ],
)
def test_a_setting_the_install_cannot_run_with_is_said_in_one_sentence(
    tmp_path, name, value, sentence
):
    """Found by a review: these gave 32 lines of traceback, or (EMBER_URL, an empty host
    list) started a worker that tried forever and a site that refused every request."""
    done = manage("check", AVATARS_DATA_DIR=str(tmp_path), **{name: value})

    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"Avatars cannot start: {sentence}"), line


@pytest.mark.parametrize("name", ["AVATARS_DATA_DIR", "AVATARS_METRICS_DIR"])
def test_a_folder_set_but_empty_is_refused_not_read_as_the_current_directory(tmp_path, name):
    """Found by a review: `AVATARS_DATA_DIR=` (an empty line in a service's environment
    file) made a new install in the directory the command ran from."""
    env = {"AVATARS_DATA_DIR": str(tmp_path), name: " "}
    done = manage("check", **env)

    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"Avatars cannot start: {name} is set but empty: name a folder"), line
    made = [p.name for p in (ROOT / "db.sqlite3", ROOT / "metrics", ROOT / " ") if p.exists()]
    assert made == [], f"made in the directory the command ran from: {made}"


def test_the_web_server_stops_with_the_same_one_sentence(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "uvicorn", "avatars.asgi:application", "--port", "1"],
        cwd=ROOT,
        env={
            **os.environ,
            "AVATARS_DATA_DIR": str(tmp_path),
            "DJANGO_SECRET_KEY": REAL_SECRET,
            "EMBER_URL": "ember.internal",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "Avatars cannot start: EMBER_URL must be an http:// or https:// URL, not 'ember.internal'"
    ]


def test_a_log_level_in_small_letters_is_taken(tmp_path):
    done = manage("check", AVATARS_DATA_DIR=str(tmp_path), AVATARS_LOG_LEVEL="debug")

    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", ["AVATARS_DATA_DIR", "AVATARS_METRICS_DIR"])
def test_a_folder_that_cannot_be_made_is_said_in_one_sentence(tmp_path, name):
    """Found by a review: a restore into a read-only data dir died in a traceback."""
    (tmp_path / "a-file").write_text("not a folder")
    folder = tmp_path / "a-file" / "data"
    env = {"AVATARS_DATA_DIR": str(tmp_path / "data"), name: str(folder)}

    done = manage("restore", str(tmp_path / "backup"), **env)

    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"Avatars cannot start: {name} {folder} cannot be made (Not a directory): point "
        f"{name} at a folder that can be written."
    )


@pytest.fixture
def person(db) -> User:
    return User.objects.create_user("ada", password="correct horse battery")


def every_studio_post(subject: Subject) -> list[str]:
    batch = a_batch(subject)
    task = batch.tasks.get()
    avatar_set = engine.create_set(name="Favourites", asset_ids=[])
    return [
        reverse("studio:subjects"),
        reverse("studio:subject", args=[subject.pk]),
        reverse("studio:batch-new"),
        reverse("studio:batch-cancel", args=[batch.pk]),
        reverse("studio:task-cancel", args=[task.pk]),
        reverse("studio:sets"),
        reverse("studio:set", args=[avatar_set.pk]),
        reverse("studio:set-publish", args=[avatar_set.pk]),
    ]


@pytest.mark.django_db
def test_every_studio_form_refuses_a_post_without_the_csrf_token(person, subject):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(person)
    for url in every_studio_post(subject):
        assert browser.post(url, {}).status_code == 403, url


@pytest.mark.django_db
def test_every_studio_route_needs_a_signed_in_person(client, subject):
    for url in [*every_studio_post(subject), reverse("studio:gallery"), reverse("studio:home")]:
        response = client.post(url, {}) if "cancel" in url or "publish" in url else client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/accounts/login/"), url


@pytest.mark.django_db
def test_originals_and_thumbnails_are_unreachable_without_a_session_or_token(
    client, make_subject, make_reference
):
    asset = make_reference(make_subject("Bo"))
    for url in (
        reverse("studio:asset-original", args=[asset.pk]),
        reverse("studio:asset-thumb", args=[asset.pk, 256]),
    ):
        assert client.get(url).status_code == 302
    api = f"/api/v1/assets/{asset.pk}/original"
    assert client.get(api).status_code == 401
    assert client.get(api, HTTP_AUTHORIZATION="Bearer nope").status_code == 401


@pytest.mark.django_db
def test_api_tokens_are_stored_as_hashes_only(person):
    token = issue_token(user=person)
    stored = ApiToken.objects.get(user=person)
    assert token not in stored.digest
    assert len(stored.digest) == 64


@pytest.mark.django_db
def test_request_parameters_never_name_a_file(client, person, make_subject, make_reference):
    client.force_login(person)
    asset = make_reference(make_subject("Cy"))
    # Only row ids and a fixed set of sizes reach the store; paths are never taken.
    assert client.get(f"/assets/{asset.pk}/thumb/9999/").status_code == 404
    assert client.get("/assets/..%2F..%2Fetc%2Fpasswd/original/").status_code == 404
    assert client.get(f"/assets/{uuid.uuid4()}/original/").status_code == 404


@pytest.mark.django_db
def test_an_upload_over_the_cap_stops_streaming_and_stores_nothing(
    client, person, make_subject, settings
):
    settings.AVATARS_MAX_IMAGE_BYTES = 50_000
    client.force_login(person)
    subject = make_subject("Di")
    before = Asset.objects.count()
    big = SimpleUploadedFile("big.png", png_bytes(1, size=(800, 800)) + b"\0" * 60_000)

    response = client.post(reverse("studio:subject", args=[subject.pk]), {"photo": big})

    assert response.status_code == 400
    assert Asset.objects.count() == before
    # In the words the door's page and photos.js use (a review read three wordings).
    assert "That photo is too large: the limit is 0.047" in response.content.decode()
    assert "MB. Nothing was uploaded." in response.content.decode()


def test_body_limits_are_set():
    from django.conf import settings

    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE <= 5 * 1024 * 1024
    assert settings.DATA_UPLOAD_MAX_NUMBER_FILES == 1  # the one file held in memory
    assert settings.FILE_UPLOAD_HANDLERS == ["studio.uploads.CappedMemoryUploadHandler"]


def test_an_upload_is_read_one_byte_past_the_cap_and_its_own_copy_let_go(settings):
    settings.AVATARS_MAX_IMAGE_BYTES = 10
    upload = SimpleUploadedFile("big.png", b"x" * 100)

    data = uploads.take(upload)

    assert data == b"x" * 11
    assert upload.file.closed, "the upload still holds its copy of the file"


def directives(header: str) -> dict[str, list[str]]:
    parsed = {}
    for part in header.split(";"):
        name, *values = part.split()
        parsed[name] = values
    return parsed


@pytest.mark.django_db
def test_every_answer_carries_a_policy_that_runs_only_the_studios_own_scripts(
    client, person, subject
):
    staff = Client()
    person.is_staff = True
    person.save()
    staff.force_login(person)
    for browser, url in [
        (client, "/accounts/login/"),
        (staff, reverse("studio:home")),
        (staff, reverse("studio:subject", args=[subject.pk])),
        (staff, "/no/such/page/"),
        (staff, "/admin/"),
        (staff, "/api/v1/docs"),
        (client, "/api/v1/subjects"),
    ]:
        policy = directives(browser.get(url)["Content-Security-Policy"])
        assert policy["default-src"] == policy["script-src"] == ["'self'"], url
        assert policy["style-src"] == policy["img-src"] == policy["form-action"] == ["'self'"]
        assert policy["object-src"] == policy["base-uri"] == policy["frame-ancestors"] == ["'none'"]
        assert policy["style-src-attr"] == ["'unsafe-inline'"], "attributes only (the bars)"


@pytest.mark.django_db
def test_the_api_docs_page_needs_no_internet(person):
    staff = Client()
    person.is_staff = True
    person.save()
    staff.force_login(person)

    page = staff.get("/api/v1/docs").content.decode()

    assert "/static/ninja/swagger-ui-bundle.js" in page
    assert "https://" not in page, "the docs page loads something from the internet"
