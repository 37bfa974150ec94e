"""Settings for Avatars, read from the environment with working defaults (docs/operations.md)."""

import os
import socket
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
from csp.constants import NONE, SELF, UNSAFE_INLINE
from django.core.exceptions import ImproperlyConfigured

from avatars.env import (
    env_bool,
    env_choice,
    env_float,
    env_folder,
    env_int,
    env_list,
    env_str,
    env_url,
    env_zone,
)

BASE_DIR = Path(__file__).resolve().parent.parent

DEV_SECRET_KEY = "dev-only-secret-key-do-not-use-in-production"
MIN_SECRET_LENGTH = 50  # characters, as Django's own deploy check asks
SECRET_KEY = env_str("DJANGO_SECRET_KEY", DEV_SECRET_KEY)
# Off unless asked for: `make demo` and the tests turn it on.
DEBUG = env_bool("DJANGO_DEBUG", False)
if not DEBUG and (SECRET_KEY == DEV_SECRET_KEY or len(SECRET_KEY.strip()) < MIN_SECRET_LENGTH):
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY must be set to a real secret of at least "
        f"{MIN_SECRET_LENGTH} characters when DJANGO_DEBUG is off. (On the demo's own data, "
        "as `make demo` runs it: DJANGO_DEBUG=true .venv/bin/python manage.py ...)"
    )
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])

# Secure by default in production (DEBUG off); each can be relaxed on its own, e.g.
# AVATARS_SSL_REDIRECT=false behind a proxy that terminates TLS and redirects itself.
_production = not DEBUG
SECURE_SSL_REDIRECT = env_bool("AVATARS_SSL_REDIRECT", _production)
SESSION_COOKIE_SECURE = env_bool("AVATARS_SECURE_COOKIES", _production)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env_int("AVATARS_HSTS_SECONDS", 31_536_000 if _production else 0, minimum=0)
# Prometheus scrapes over plain HTTP on loopback, and follows no redirect to TLS there.
SECURE_REDIRECT_EXEMPT = [r"^metrics$"]
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("AVATARS_HSTS_INCLUDE_SUBDOMAINS", _production)
# Preloading is a promise to browsers that is slow to take back: the operator opts in.
SECURE_HSTS_PRELOAD = env_bool("AVATARS_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = ["security.W021"]  # "preload is off": on purpose, see above
if env_bool("AVATARS_BEHIND_TLS_PROXY", False):
    # Trust the proxy's X-Forwarded-Proto: only set this behind a proxy that sets it.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True


def _make_folder(folder: Path, name: str) -> None:
    """Make `folder` (only its owner may look inside), or say in a sentence why it cannot be."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ImproperlyConfigured(
            f"{name} {folder} cannot be made ({exc.strerror}): point {name} at a folder "
            "that can be written."
        ) from None


AVATARS_DATA_DIR = Path(env_folder("AVATARS_DATA_DIR", str(BASE_DIR / "data"))).resolve()
# The SQLite file lives here, so the directory must exist before the first connection.
# It holds every original and the database: only the owner may look inside.
_make_folder(AVATARS_DATA_DIR, "AVATARS_DATA_DIR")
# Prometheus' multiprocess mode (docs/operations.md §Metrics): every process that counts
# (web servers, the worker) writes its own file here, and `/metrics` sums them. One folder
# per machine: its files are named by process id, which another machine may reuse.
# prometheus_client reads the variable once, when first imported: settings come first.
AVATARS_METRICS_DIR = Path(
    env_folder("AVATARS_METRICS_DIR", str(AVATARS_DATA_DIR / "metrics" / socket.gethostname()))
).resolve()
_make_folder(AVATARS_METRICS_DIR, "AVATARS_METRICS_DIR")
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(AVATARS_METRICS_DIR)
# The bearer token a scrape of /metrics must carry; unset, only loopback may scrape.
AVATARS_METRICS_TOKEN = env_str("AVATARS_METRICS_TOKEN", "")
AVATARS_WORKERS = env_int("AVATARS_WORKERS", 4, minimum=1)
# Seconds between polls of one running Ember job. Lower it only for tests and benchmarks.
AVATARS_POLL_INTERVAL = env_float("AVATARS_POLL_INTERVAL", 3.0, minimum=0.0)
# An uncertain image's lost submit is looked up in Ember's history by the worker: each
# task at most once per AVATARS_ADOPT_EVERY seconds (the first look that long after the
# submit), and at most AVATARS_ADOPT_PER_MINUTE searches a minute in all (0: never). The
# cap counts tasks searched in the last minute, so it needs each task once a minute at most.
AVATARS_ADOPT_EVERY = env_float("AVATARS_ADOPT_EVERY", 300.0, minimum=60.0)
AVATARS_ADOPT_PER_MINUTE = env_int("AVATARS_ADOPT_PER_MINUTE", 30, minimum=0)
EMBER_URL = env_url("EMBER_URL", "http://127.0.0.1:8765").rstrip("/")
EMBER_TOKEN = env_str("EMBER_TOKEN", "dev-token")

# Uploads and Ember results are decoded in full before they are stored; these
# caps keep one request from exhausting memory.
AVATARS_MAX_IMAGE_BYTES = env_int("AVATARS_MAX_IMAGE_BYTES", 25 * 1024 * 1024, minimum=1)
AVATARS_MAX_IMAGE_PIXELS = env_int("AVATARS_MAX_IMAGE_PIXELS", 40_000_000, minimum=1)
# The largest request body read at all (checked before Django reads it): one image plus
# room for the form fields around it.
AVATARS_MAX_BODY_BYTES = env_int(
    "AVATARS_MAX_BODY_BYTES", AVATARS_MAX_IMAGE_BYTES + 1024 * 1024, minimum=1
)
# Someone not signed in sends sign-in forms (a few hundred bytes), nothing larger, and
# promptly; a body that stops arriving is dropped (seconds without a byte).
AVATARS_ANONYMOUS_BODY_BYTES = env_int("AVATARS_ANONYMOUS_BODY_BYTES", 64 * 1024, minimum=1)
AVATARS_ANONYMOUS_BODY_SECONDS = env_int("AVATARS_ANONYMOUS_BODY_SECONDS", 10, minimum=1)
AVATARS_BODY_IDLE_SECONDS = env_int("AVATARS_BODY_IDLE_SECONDS", 60, minimum=1)
# The slowest a body may arrive on average (after the idle limit's grace): 25 MB in 42 min.
AVATARS_BODY_MIN_BYTES_PER_SECOND = env_int("AVATARS_BODY_MIN_BYTES_PER_SECOND", 10_000, minimum=1)
# Every frame of an animation is decoded onto the whole canvas: cap the frames and the
# pixels decoded across all of them, so a tiny file cannot cost minutes of CPU.
AVATARS_MAX_FRAMES = env_int("AVATARS_MAX_FRAMES", 300, minimum=1)
AVATARS_MAX_TOTAL_PIXELS = env_int("AVATARS_MAX_TOTAL_PIXELS", 200_000_000, minimum=1)
# Pillow composes each frame onto canvases of the whole size (several at once): an
# animation's canvas is capped well below a still's, so one costs no more memory.
AVATARS_MAX_ANIMATION_PIXELS = env_int("AVATARS_MAX_ANIMATION_PIXELS", 10_000_000, minimum=1)
# Full decodes (uploads, Ember's results, thumbnails) a process runs at once; more wait.
AVATARS_DECODES_AT_ONCE = env_int("AVATARS_DECODES_AT_ONCE", 2, minimum=1)
# Uploads a web process parses and stores at once (each holds a few copies of its file);
# more wait their turn with their bodies in temporary files (studio.uploads.UploadTurns).
AVATARS_UPLOADS_AT_ONCE = env_int("AVATARS_UPLOADS_AT_ONCE", 2, minimum=1)
# Upload bodies a web process receives at once (each may be spooled to a temporary file,
# up to AVATARS_MAX_BODY_BYTES); more wait unread, then 503 (avatars/upload_bodies.py).
AVATARS_UPLOAD_BODIES_AT_ONCE = env_int("AVATARS_UPLOAD_BODIES_AT_ONCE", 8, minimum=1)
# Of those, how many one person (a signed-in session's user, a token's) holds at once: one
# person's trickled uploads may not keep every other person's photos waiting.
AVATARS_UPLOAD_BODIES_A_PERSON = env_int("AVATARS_UPLOAD_BODIES_A_PERSON", 4, minimum=1)

# Request bodies other than files stay small (JSON, forms); files are capped at
# AVATARS_MAX_IMAGE_BYTES while they stream in, held in memory (studio.uploads). The ASGI
# door holds such a body to this too, streamed or not, and names it when refusing one.
DATA_UPLOAD_MAX_MEMORY_SIZE = 2_621_440  # bytes (2.5 MiB)
# A reference upload takes exactly one file: a second part is refused before it is read,
# so per-file caps cannot be multiplied by sending many parts.
DATA_UPLOAD_MAX_NUMBER_FILES = 1
FILE_UPLOAD_HANDLERS = ["studio.uploads.CappedMemoryUploadHandler"]

# The provider catalogue: key -> label, default model and the models a batch may name
# (docs/api.md). A model outside `models` is refused: made-up names must not multiply a
# provider's candidates.
AVATARS_PROVIDERS: dict[str, dict[str, Any]] = {
    "openai": {"label": "GPT Image", "model": "gpt-image-1", "models": ["gpt-image-1"]},
    "flux": {"label": "FLUX", "model": "flux-dev", "models": ["flux-dev", "flux-pro"]},
    "google": {"label": "Imagen", "model": "imagen-4", "models": ["imagen-4"]},
}

# Every task is a paid Ember job: these bound what one request, and one user, can spend.
AVATARS_MAX_TASKS_PER_BATCH = env_int("AVATARS_MAX_TASKS_PER_BATCH", 200, minimum=1)
# Tasks one user may plan in the last 24 hours (0 turns the cap off). 1000 is five of the
# largest batches a day, ten times the largest the default catalogue can make (96), yet it
# bounds what a leaked token or a looping script can spend before someone looks.
AVATARS_DAILY_TASK_CAP = env_int("AVATARS_DAILY_TASK_CAP", 1000, minimum=0)
# The new-batch form asks "Start them?" a second time before planning more paid jobs
# than this at once (0: ask for every batch).
AVATARS_CONFIRM_JOBS_ABOVE = env_int("AVATARS_CONFIRM_JOBS_ABOVE", 12, minimum=0)
# Every task sends all of its batch's reference photos to Ember, base64 in one JSON body:
# one task with 63 MB of it took 191 MiB of worker memory. 40 MiB is room for 8 phone
# photos of about 5 MiB, and a fifth of the 200 MiB that 8 photos at the upload cap
# would be; a task's body stays near 53 MiB, below what was seen.
AVATARS_MAX_REFERENCES = env_int("AVATARS_MAX_REFERENCES", 8, minimum=1)
AVATARS_MAX_REFERENCE_BYTES = env_int("AVATARS_MAX_REFERENCE_BYTES", 40 * 1024 * 1024, minimum=1)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    # Its Swagger page from its own static files, not a CDN: the studio needs no internet.
    "ninja",
    "axes",
    "csp",
    "studio",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Before anything parses an upload (the CSRF check reads a form's fields): a few at once.
    "studio.uploads.UploadTurns",
    # What WhiteNoise answers, read a chunk at a time off uvicorn's loop (static_files.py).
    "studio.web.static_files.AsyncStaticFiles",
    # Serves static files from the app itself (admin CSS, htmx) under any server.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Signed-in pages (and the API's answers to a token) are never cached, unless they say.
    "studio.web.caching.PrivatePages",
    # Content-Security-Policy on every answer (CONTENT_SECURITY_POLICY below).
    "csp.middleware.CSPMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # A studio address opened that only takes a form's button press: a page, not an empty 405.
    "studio.web.refusals.MethodNotAllowedPage",
    # Last: turns a sign-in refused for earlier failures into the studio's 429 page.
    "axes.middleware.AxesMiddleware",
]
# A form refused for its CSRF token gets the studio's page, with its navigation.
CSRF_FAILURE_VIEW = "studio.web.refusals.csrf_failure"

ROOT_URLCONF = "avatars.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "avatars.wsgi.application"
ASGI_APPLICATION = "avatars.asgi.application"

# SQLite: WAL so the web process reads while the worker writes; synchronous=FULL
# because a committed state must survive power loss (the next step may be a paid
# request); IMMEDIATE transactions take the write lock up front, so two writers
# wait on the busy timeout instead of failing with "database is locked".
SQLITE_OPTIONS = {
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;",
    "transaction_mode": "IMMEDIATE",
    "timeout": 30,  # seconds
}

_database_url = env_str("DATABASE_URL", "")
if _database_url:
    try:
        DATABASES = {"default": dj_database_url.parse(_database_url, conn_max_age=0)}
    except ValueError as exc:  # dj_database_url's UnknownSchemeError among them
        raise ImproperlyConfigured(
            f"DATABASE_URL is not a database URL ({exc}); for PostgreSQL: "
            "postgres://user:password@host:5432/name"
        ) from None
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(AVATARS_DATA_DIR / "db.sqlite3"),
            "OPTIONS": SQLITE_OPTIONS,
            # Tests run on a real file (WAL, fsync) so "committed" means what it says;
            # one per test run, so runs side by side do not share it.
            "TEST": {
                "NAME": str(Path(tempfile.gettempdir()) / f"avatars-test-{os.getpid()}.sqlite3")
            },
        }
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].setdefault("OPTIONS", {}).update(SQLITE_OPTIONS)
    _sqlite_file = Path(DATABASES["default"]["NAME"])
    if _sqlite_file.parent.is_dir() and not _sqlite_file.exists():
        # SQLite would create it world-readable (0644 under the usual umask); an empty
        # file is a valid empty database, and its -wal and -shm files copy its mode.
        # Another of our processes starting at the same moment (the web process and the
        # worker on a fresh data dir) may create it first, the same way: that is as good.
        try:
            os.close(os.open(_sqlite_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            pass
        except OSError as exc:
            raise ImproperlyConfigured(
                f"The database {_sqlite_file} cannot be made ({exc.strerror}): point "
                "AVATARS_DATA_DIR at a folder that can be written."
            ) from None

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-gb"
# The zone the studio shows times in (they are stored in UTC whatever it is).
TIME_ZONE = env_zone("AVATARS_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = AVATARS_DATA_DIR / "static"  # filled by collectstatic for production
STATIC_ROOT.mkdir(exist_ok=True)

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

# Scripts, styles, images and fetches come from the studio itself: a name or a prompt that
# slipped past escaping could run nothing. Styles inline only as attributes (the progress
# bar's widths), never as <style> elements; no plugins, no frames, no other <base>, forms
# post only here.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "style-src-attr": [UNSAFE_INLINE],
        "img-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

# Failed sign-ins (the studio's and the admin's) are counted per username and address;
# past the limit, that pair is refused until the wait has passed since its last try.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("AVATARS_SIGN_IN_FAILURES", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_float("AVATARS_SIGN_IN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_LOCKOUT_CALLABLE = "studio.web.signing_in.locked_out"
AXES_RESET_ON_SUCCESS = True  # a person who gets it right starts counting afresh
AXES_DISABLE_ACCESS_LOG = True  # failures are kept (the admin lists them), not every sign-in
AXES_VERBOSE = False  # its start-up banner; each failure is still logged as a warning

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")  # AVATARS_LOG_LEVEL's, any case
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        # The worker's and the commands' lines: a database out of reach in one line, as the
        # web's (a review's worker wrote 1,130 lines of tracebacks over a 60 s stop).
        "studio": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["database_outage"],
        },
    },
    "filters": {
        "without_traceback": {"()": "avatars.logfilters.WithoutTraceback"},
        "database_outage": {"()": "avatars.logfilters.DatabaseOutage"},
    },
    "loggers": {
        "studio": {
            "handlers": ["studio"],
            "level": env_choice("AVATARS_LOG_LEVEL", "INFO", LEVELS),
        },
        # The web server's door (avatars/bodylimit.py, heads.py): dated as the rest, not bare.
        "avatars": {"handlers": ["console"], "level": "WARNING"},
        # Django's own console output is for DEBUG only, and it mails errors to ADMINS (none
        # here): without this, a 500 in production would leave no trace. 4xx answers to bad
        # input are not errors of ours, and are not logged one by one.
        "django": {"handlers": ["console"], "level": "WARNING"},
        # A database out of reach: one line a request, not a traceback (avatars/outage.py).
        "django.request": {"level": "ERROR", "filters": ["database_outage"]},
        # A foreign Host header: one line saying which, not a traceback a request.
        "django.security.DisallowedHost": {"filters": ["without_traceback"]},
        "httpx": {"level": "WARNING"},
    },
}
