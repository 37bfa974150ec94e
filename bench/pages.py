"""Goal: pages do not grow with history.

Two installs side by side, one with 1k generated assets and one with 100k (each
from a done task with its attempt, in finished batches of 200). Each renders the
gallery and the newest batch's page through Django's test client, signed in,
in alternating rounds. When a page grows, the queries behind it are timed one
by one in both installs and the ones that grow are printed with their plans.
"""

import re
import time
from typing import Any

from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from bench import data
from bench.common import Context, Result, call_all, children, median, paired_ratio
from studio.models import Batch

TARGET = 1.2
PAGES = ("gallery", "batch")


def run(ctx: Context) -> Result:
    history = ctx.size(100_000, 10_000)
    base = 1_000
    rounds = ctx.size(15, 7)
    renders = ctx.size(20, 10)
    ctx.log(f"pages: building installs with {base:,} and {history:,} assets")
    with children(ctx, __name__, "pages-small", "pages-big") as (small, big):
        call_all([(small, "setup", {"history": base}), (big, "setup", {"history": history})])
        ctx.log(f"pages: rendering {', '.join(PAGES)} x{renders}, {rounds} alternating rounds")
        times: dict[tuple[str, str], list[float]] = {
            (side, page): [] for side in ("small", "big") for page in PAGES
        }
        sides = [("small", small), ("big", big)]
        for _round in range(rounds):
            for side, child in sides:
                for page in PAGES:
                    times[side, page].append(child.call("render", page=page, renders=renders))
            sides.reverse()
        ratios = {page: paired_ratio(times["big", page], times["small", page]) for page in PAGES}
        notes = []
        for page in PAGES:
            if ratios[page] > TARGET:
                notes += _growth(
                    page, small.call("profile", page=page), big.call("profile", page=page)
                )
    worst = max(ratios.values())
    raw = "; ".join(
        f"{page} {ratios[page]:.2f}x ({median(times['small', page]) * 1e3:.1f} ms with "
        f"{base // 1000}k vs {median(times['big', page]) * 1e3:.1f} ms with {history // 1000}k)"
        for page in PAGES
    )
    return Result(
        goal="pages vs history (worst page)",
        measured=worst,
        unit="x",
        target=f"≤ {TARGET}x",
        passed=worst <= TARGET,
        raw=f"{raw}; medians of {rounds} alternating rounds x {renders} renders",
        notes=notes,
    )


def _growth(page: str, small: list[dict[str, Any]], big: list[dict[str, Any]]) -> list[str]:
    """Say which of a page's queries grow with history (same queries, in the same order)."""
    lines = [f"the {page} page grows; its queries, 1k vs big install:"]
    for one, other in zip(small, big, strict=False):
        grows = other["ms"] > 1.5 * one["ms"] and other["ms"] - one["ms"] > 0.2
        mark = "GROWS" if grows else "flat "
        lines.append(f"{mark} {one['ms']:6.2f} ms → {other['ms']:6.2f} ms  {other['sql']}")
        if grows:
            lines.append(f"        plan: {other['plan']}")
    return lines


# --- in the child -------------------------------------------------------------

_client = Client()
_urls: dict[str, str] = {}


def op_setup(history: int) -> dict[str, Any]:
    """Migrate, write the history, and sign a person in."""
    data.migrate()
    subject = data.subject_with_reference()
    data.add_history(history, subject, assets=True, attempts=True)
    user = User.objects.create_user("bench", password=None)
    _client.force_login(user)
    newest = Batch.objects.order_by("-created_at").first()
    assert newest is not None
    _urls.update(gallery="/gallery/", batch=f"/batches/{newest.pk}/")
    for page in PAGES:
        op_render(page, renders=3)  # warm the page: imports, template loading, caches
    return {"batch_tasks": newest.tasks.count()}


def op_render(page: str, renders: int) -> float:
    """Render `page` `renders` times; return the median seconds."""
    samples = []
    for _ in range(renders):
        started = time.perf_counter()
        response = _client.get(_urls[page])
        samples.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise RuntimeError(f"{_urls[page]} answered {response.status_code}")
    return median(samples)


def op_profile(page: str, renders: int = 10) -> list[dict[str, Any]]:
    """Time each query of a page (median over renders) and give SQLite's plan for it."""
    timer = _QueryTimer()
    for _ in range(renders):
        timer.calls = 0
        with connection.execute_wrapper(timer):
            _client.get(_urls[page])
    out = []
    for (sql, params), samples in zip(timer.statements, timer.samples, strict=True):
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            plan = "; ".join(str(row[-1]) for row in cursor.fetchall())
        out.append({"sql": _short_sql(sql), "ms": median(samples) * 1e3, "plan": plan})
    return out


def _short_sql(sql: str) -> str:
    """Drop a long column list: what a query reads, filters and orders by is what grows."""
    sql = " ".join(sql.split())
    return re.sub(r"^SELECT [^()]*?, .*? FROM ", "SELECT … FROM ", sql)


class _QueryTimer:
    """An execute wrapper that times the n-th query of each render."""

    def __init__(self) -> None:
        self.calls = 0
        self.statements: list[tuple[str, Any]] = []
        self.samples: list[list[float]] = []

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            if self.calls == len(self.samples):
                self.samples.append([])
                self.statements.append((sql, params))
            self.samples[self.calls].append(time.perf_counter() - started)
            self.calls += 1
