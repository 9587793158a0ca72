"""Property-based fuzzing of the gateway's OpenAPI schema with schemathesis, in process (ASGI).

The app talks to a real Redis and a real worker, so well-formed requests really synthesize. Whatever
schemathesis sends, the answer must not be a 5xx, and every error must have the one error body.
Bounded: a few examples per operation, texts of at most 40 characters (so each real synthesis is quick on
two cores), and every request must be answered within REQUEST_TIMEOUT_S (a hang fails the test).
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from gateway import GatewaySettings, create_app
from wire.settings import load_settings
from tests.conftest import Farm

pytestmark = pytest.mark.slow

MAX_EXAMPLES = 12
MAX_CHARS = 40
REQUEST_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def app(farm: Farm) -> Any:
    """The app under test, on the farm's prefix; short texts keep each real synthesis quick."""
    gateway = GatewaySettings(max_input_chars=MAX_CHARS, first_chunk_timeout_s=60, job_timeout_s=60)
    return create_app(farm.settings.replace(frontend={"max_text_chars": MAX_CHARS}), gateway)


# The schema does not depend on settings, so it is read at import from an app that is never started;
# each case is then sent in process to the fixture's app (schemathesis runs its lifespan).
schema = schemathesis.openapi.from_dict(create_app(load_settings()).openapi())


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_no_server_errors(case: Any, app: Any) -> None:
    response = case.call(app=app, base_url="http://testserver", timeout=REQUEST_TIMEOUT_S)
    assert response.status_code < 500, f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}"
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error["code"], str) and error["code"] and isinstance(error["message"], str)
