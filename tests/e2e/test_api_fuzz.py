"""Schemathesis fuzzes every operation of the OpenAPI document against a live uvicorn.

No operation answers 5xx, and every answer is one the document states: a documented
status, a documented content type, a body matching its schema. A request the schema
allows may still be refused (400, 404): an id must name a row, a cursor must be one the
API gave out, a batch must stay within the caps. The schema cannot say so, and the engine
is the judge: Schemathesis' checks of acceptance and rejection are left out (see LOOSE).
"""

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import negative_data_rejection, positive_data_acceptance

from tests.processes import Template, Web, new_stack, simulator

# A user allowed to reconcile (studio.change_task), so that no operation is closed to it,
# and a subject with a photo so that the lists are not empty.
TOKEN_SEED = """
from django.contrib.auth.models import Permission, User
from studio import engine
from studio.api.auth import issue_token
from tests.factories import png_bytes
ops = User.objects.create_user("ops")
ops.user_permissions.add(Permission.objects.get_by_natural_key("change_task", "studio", "task"))
ada = engine.create_subject(name="Ada")
engine.add_reference(subject=ada, data=png_bytes(1), file_name="ada.png")
result = issue_token(user=ops)
"""


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, template: Template
) -> Iterator[tuple[Web, str]]:
    # One install for the module: `stack` is per test, and the fuzzing reads one server.
    tmp = tmp_path_factory.mktemp("fuzz")
    with simulator(tmp / "sim") as sim:
        stack = new_stack(template, tmp / "install", sim)
        token = stack.django(TOKEN_SEED)
        web = Web(stack)
        try:
            yield web, token
        finally:
            web.stop()


@pytest.fixture(scope="module")
def api_schema(served: tuple[Web, str]) -> Any:
    web, token = served
    return schemathesis.openapi.from_url(
        f"{web.url}/api/v1/openapi.json", headers={"Authorization": f"Bearer {token}"}
    )


# docs/api.md's table. Each is fuzzed on its own, so a failure names its operation.
OPERATIONS = [
    ("GET", "/api/v1/subjects"),
    ("POST", "/api/v1/subjects"),
    ("POST", "/api/v1/subjects/{subject_id}/references"),
    ("POST", "/api/v1/batches"),
    ("GET", "/api/v1/batches/{batch_id}"),
    ("POST", "/api/v1/batches/{batch_id}/cancel"),
    ("GET", "/api/v1/tasks/{task_id}"),
    ("POST", "/api/v1/tasks/{task_id}/cancel"),
    ("POST", "/api/v1/tasks/{task_id}/reconcile"),
    ("GET", "/api/v1/assets/{asset_id}"),
    ("GET", "/api/v1/assets/{asset_id}/original"),
    ("POST", "/api/v1/sets"),
    ("GET", "/api/v1/sets/{set_id}"),
    ("POST", "/api/v1/sets/{set_id}/publish"),
]
MODES = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
# Left out, both about what a request *means* rather than how it is answered: a request
# the schema allows may be refused (an id must name a row), and one it does not allow may
# be served (an unknown query parameter such as `?=` is ignored, as HTTP APIs do). No 5xx,
# documented statuses, content types and bodies are checked on every answer.
LOOSE = [positive_data_acceptance, negative_data_rejection]


def test_it_fuzzes_every_operation_the_document_has(api_schema: Any) -> None:
    documented = [
        (result.ok().method.upper(), result.ok().path) for result in api_schema.get_all_operations()
    ]

    assert sorted(documented) == sorted(OPERATIONS)


@pytest.mark.parametrize("mode", MODES, ids=[m.value for m in MODES])
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_it_answers_every_operation_as_its_document_says(
    api_schema: Any, served: tuple[Web, str], method: str, path: str, mode: GenerationMode
) -> None:
    _web, token = served
    operation = api_schema[path][method]

    @given(case=operation.as_strategy(generation_mode=mode))
    # Derandomized: the same requests every run, so the suite is reproducible; a wider
    # search is a matter of raising max_examples locally.
    @settings(
        max_examples=20,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case: Any) -> None:
        case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, excluded_checks=LOOSE)

    fuzz()
