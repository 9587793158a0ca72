"""``X-Request-Id`` on every HTTP answer of the gateway (``gateway.request_ids``): the job's id where there is a job,
errors included; a request id otherwise. Real redis-server, a real worker, the gateway served by uvicorn."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient

from gateway import GatewaySettings, create_app
from tests.conftest import Farm

pytestmark = pytest.mark.slow


def test_every_answer_about_a_job_carries_its_id(gateway_http: httpx.Client) -> None:
    r = gateway_http.post("/v1/jobs", json={"text": "A request id is the job id.", "voice": "joe"})
    assert r.status_code == 201 and r.headers["x-request-id"] == r.json()["id"]
    job_id = r.json()["id"]
    assert gateway_http.get(f"/v1/jobs/{job_id}").headers["x-request-id"] == job_id
    assert gateway_http.delete(f"/v1/jobs/{job_id}").headers["x-request-id"] == job_id
    for suffix in ("/audio", "/captions"):  # errors where the job exists: still the job's id
        r = gateway_http.get(f"/v1/jobs/{job_id}{suffix}")
        assert r.status_code == 409 and r.json()["error"]["code"] == "JOB_NOT_DONE"
        assert r.headers["x-request-id"] == job_id
    with gateway_http.stream("GET", f"/v1/jobs/{job_id}/events") as events:
        assert events.status_code == 200 and events.headers["x-request-id"] == job_id


def test_speech_answers_with_the_job_id(gateway_http: httpx.Client) -> None:
    with gateway_http.stream("POST", "/v1/audio/speech", json={"input": "Hello there.", "response_format": "pcm"}) as r:
        assert r.status_code == 200
        assert r.headers["x-request-id"] == r.headers["x-job-id"]
        r.read()
    r = gateway_http.post("/v1/audio/speech", json={"input": "", "response_format": "pcm"})
    assert r.status_code == 400 and r.headers["x-request-id"].startswith("req_")


def test_answers_without_a_job_carry_a_request_id(gateway_http: httpx.Client) -> None:
    first, second = gateway_http.get("/v1/jobs/no-such-job"), gateway_http.get("/v1/jobs/no-such-job")
    assert first.status_code == 404 and first.json()["error"]["code"] == "JOB_NOT_FOUND"
    ids = {first.headers["x-request-id"], second.headers["x-request-id"]}
    assert len(ids) == 2 and all(i.startswith("req_") for i in ids)
    assert gateway_http.post("/v1/jobs", json={"text": 3}).headers["x-request-id"].startswith("req_")
    assert gateway_http.get("/healthz").headers["x-request-id"].startswith("req_")
    assert gateway_http.get("/v1/nowhere").headers["x-request-id"].startswith("req_")


def test_a_plain_client_request_id_is_kept_and_an_odd_one_replaced(gateway_http: httpx.Client) -> None:
    r = gateway_http.get("/v1/voices", headers={"X-Request-Id": "call-42.a:b"})
    assert r.headers["x-request-id"] == "call-42.a:b"
    for odd in ("has space", "x" * 65, "semi;colon"):
        assert gateway_http.get("/v1/voices", headers={"X-Request-Id": odd}).headers["x-request-id"].startswith("req_")
    r = gateway_http.post("/v1/jobs", json={"text": "The job wins.", "voice": "joe"}, headers={"X-Request-Id": "mine"})
    assert r.headers["x-request-id"] == r.json()["id"] != "mine"
    gateway_http.delete(r.json()["links"]["self"])


def test_refused_and_cross_origin_answers_carry_it(farm: Farm) -> None:
    app = create_app(farm.settings, GatewaySettings(api_keys=("k-one",), cors=("https://app.example",)))
    with TestClient(app) as c:
        r = c.get("/v1/voices")
        assert r.status_code == 401 and r.headers["x-request-id"].startswith("req_")
        r = c.get("/v1/voices", headers={"Authorization": "Bearer k-one", "Origin": "https://app.example"})
        assert r.status_code == 200 and "x-request-id" in r.headers["access-control-expose-headers"].lower()
