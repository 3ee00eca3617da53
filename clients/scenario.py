"""A client developer's first session, driven only through the client that openapi-python-client
generated from the server's /openapi.json (package `marketplace_client`, put on PYTHONPATH by
.ci/clients): reset the demo data, register a company account and log in with it, then, as the
demo company (its e-mail verified and its profile complete, which a new account cannot reach
without reading its confirmation e-mail), create a project and find it in `GET /api/projects/my`.

Every call goes through the generated functions and models; a status other than the documented
success, or an answer the generated parser cannot read, fails the scenario.

The generated functions are found by method and path in the document (tag and operationId name
the generated module), so renaming an operationId in src changes nothing here.

Environment: MARKETPLACE_URL (the server), TEST_RESET_TOKEN (its end-to-end reset token),
OPENAPI_FILE (the document the client was generated from).
"""

import importlib
import inspect
import json
import os
import sys
import uuid

from marketplace_client import AuthenticatedClient, Client
from marketplace_client.models import (
    CreateProjectRequest,
    LoginRequest,
    LoginResponse,
    PaginatedProjectView,
    ProjectView,
    RegisterRequest,
    ResetReport,
    SecureLoginResponse,
)

BASE = os.environ["MARKETPLACE_URL"]
RESET_TOKEN = os.environ["TEST_RESET_TOKEN"]
DEMO_PASSWORD = "Demo1234!"
SPEC = json.load(open(os.environ["OPENAPI_FILE"]))


def operation(method, path):
    """The generated module of `method path`, named as the generator names it (the same
    PythonIdentifier of the operation's first tag and of its operationId)."""
    from openapi_python_client.strings import PythonIdentifier

    item = SPEC["paths"].get(path) or SPEC["paths"].get(path.rstrip("/"))
    if not item or method not in item:
        sys.exit(f"the document has no {method.upper()} {path}")
    op = item[method]
    tag = PythonIdentifier((op.get("tags") or ["default"])[0], prefix="tag")
    name = PythonIdentifier(op["operationId"], prefix="field_")
    return importlib.import_module(f"marketplace_client.api.{tag}.{name}")


reset_e2e = operation("post", "/api/v1/testing/reset-e2e")
register = operation("post", "/api/auth/register")
login = operation("post", "/api/auth/login")
create = operation("post", "/api/projects/")
my_projects = operation("get", "/api/projects/my")


def expect(response, status, model):
    """The generated `*_detailed` answer, checked: its status, and its body parsed as `model`."""
    if response.status_code != status or not isinstance(response.parsed, model):
        sys.exit(
            f"expected {status} {model.__name__}, got {int(response.status_code)} "
            f"{type(response.parsed).__name__}: {response.content[:500]!r}"
        )
    return response.parsed


def step(text):
    print(f"scenario: {text}", flush=True)


anonymous = Client(base_url=BASE, raise_on_unexpected_status=True, timeout=30)

step("reset the demo data")
report = expect(
    reset_e2e.sync_detailed(client=anonymous, x_test_reset_token=RESET_TOKEN), 200, ResetReport
)
assert any(a.username == "demo_empresa" for a in report.accounts), report

step("register a company account")
suffix = uuid.uuid4().hex[:10]
username = f"client_{suffix}"
password = f"Client-{suffix}!"
registered = expect(
    register.sync_detailed(
        client=anonymous,
        body=RegisterRequest(
            email=f"{username}@example.com",
            username=username,
            password=password,
            roles=["empresa"],
        ),
    ),
    201,
    SecureLoginResponse,
)
assert registered.user.username == username, registered.user

step("log in with it")
session = expect(
    login.sync_detailed(client=anonymous, body=LoginRequest(username=username, password=password)),
    200,
    LoginResponse,
)
assert session.access_token and session.user.username == username

step("log in as the demo company")
demo = expect(
    login.sync_detailed(
        client=anonymous, body=LoginRequest(username="demo_empresa", password=DEMO_PASSWORD)
    ),
    200,
    LoginResponse,
)
company = AuthenticatedClient(
    base_url=BASE, token=demo.access_token, raise_on_unexpected_status=True, timeout=30
)

step("create a project")
title = f"Generated-client project {suffix}"
body = CreateProjectRequest(
    title=title,
    description="A project created by the client generated from /openapi.json.",
    budget=1500.0,
    deadline="2099-01-01T00:00:00",
    skills_required=["Rust"],
    project_type="curated",
    status="pending_publication",
)
# Once the document declares the optional Idempotency-Key header (issue 34), the generated
# function takes it: then a retry with the same key must answer the same project.
idempotent = "idempotency_key" in inspect.signature(create.sync_detailed).parameters
key = {"idempotency_key": f"scenario-{suffix}"} if idempotent else {}
created = expect(create.sync_detailed(client=company, body=body, **key), 201, ProjectView)
assert created.title == title and created.skills_required == ["Rust"], created
if idempotent:
    step("retry the creation with the same Idempotency-Key")
    replay = create.sync_detailed(client=company, body=body, **key)
    again = expect(replay, 201, ProjectView)
    assert again.id == created.id, (again.id, created.id)
    assert replay.headers.get("idempotent-replayed") == "true", replay.headers
else:
    step("(the document declares no Idempotency-Key on this operation yet: no retry made)")

step("list my projects and find it")
page = expect(my_projects.sync_detailed(client=company, size=100), 200, PaginatedProjectView)
mine = [p for p in page.items if p.id == created.id]
assert len(mine) == 1, [p.id for p in page.items]
assert mine[0].title == title, mine[0]
step(f"project {created.id} is in the list of {page.total}: passed")
