"""Mutants of what a client meets: the SDK and the Redis connection under it, the gRPC and HTTP front ends (README.md's
error codes, docs/RELIABILITY.md's failover and idempotent submits), and the rules of admission at submit."""

from __future__ import annotations

from tests.mutants import Mutant

GRPC = "tests/test_grpc.py::"
AGENTS = "tests/test_gateway_agents.py::"

FRONTS = [
    # -- what the audit saw pass ---------------------------------------------------------------------------------
    Mutant("sentinel-client-without-retries",
           "RELIABILITY failover: a command whose connection was lost is re-sent on a fresh connection to the master",
           "wire/redis/connect.py", '**{"retry": retry, **parsed.node_kwargs(), **redis_kwargs}',
           "**{**parsed.node_kwargs(), **redis_kwargs}",
           ("tests/test_redis_connect.py::test_a_sentinel_client_sends_a_command_again_when_its_connection_is_lost",)),
    Mutant("unary-synthesize-never-cancels",
           "README gRPC: a call whose client goes away (cancelled, or past its deadline) cancels its job, Synthesize too",
           "grpcfront/service.py",
           "job = await self._submit(request.text, asked)\n            self._cancel_when_over(context, job)\n",
           "job = await self._submit(request.text, asked)\n",
           (GRPC + "test_a_deadline_cancels_the_job_of_a_unary_synthesize",)),
    Mutant("overloaded-is-unavailable",
           "README gRPC: OVERLOADED is RESOURCE_EXHAUSTED",
           "grpcfront/errors.py",
           "if isinstance(exc, OverloadedError):\n        return grpc.StatusCode.RESOURCE_EXHAUSTED",
           "if isinstance(exc, OverloadedError):\n        return grpc.StatusCode.UNAVAILABLE",
           (GRPC + "test_a_full_lane_is_resource_exhausted",)),
    # -- what the tests caught -----------------------------------------------------------------------------------
    Mutant("no-workers-is-internal", "README gRPC: no serving worker is UNAVAILABLE (NO_WORKERS)",
           "grpcfront/errors.py", 'FrontError(grpc.StatusCode.UNAVAILABLE, "no farm worker is serving',
           'FrontError(grpc.StatusCode.INTERNAL, "no farm worker is serving',
           (GRPC + "test_no_worker_is_unavailable",)),
    Mutant("overloaded-is-503", "README HTTP: OVERLOADED is 429 with Retry-After",
           "gateway/errors.py", "if isinstance(exc, OverloadedError):\n        return 429",
           "if isinstance(exc, OverloadedError):\n        return 503",
           ("tests/test_gateway.py::test_overloaded_is_429",)),
    Mutant("submit-not-retried",
           "RELIABILITY: submit retries the same job (same id: admission is idempotent) after a lost connection",
           "producer/core.py", "SUBMIT_RETRIES = 5", "SUBMIT_RETRIES = 0",
           ("tests/test_broker_seam.py::test_a_submit_whose_reply_was_lost_is_queued_once",)),
    Mutant("job-ids-with-dots-and-slashes",
           "RELIABILITY: storage keys cannot leave their prefix (job ids are [A-Za-z0-9_-]{8,64})",
           "wire/keys.py", 'JOB_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")', 'JOB_ID = re.compile(r"[A-Za-z0-9_./\\\\-]{4,64}")',
           ("tests/test_backpressure.py::test_job_ids_that_could_escape_a_storage_prefix_are_malformed",)),
    Mutant("submit-admits-none-past-the-horizon",
           "RELIABILITY just-in-time admission: a submit admits at least its first segment, even past the horizon",
           "wire/admission.py", "        if total >= horizon_s:\n            return i + 1",
           "        if total >= horizon_s:\n            return i",
           ("tests/test_admission.py::test_a_submit_admits_the_first_segments_up_to_the_horizon",)),
    Mutant("bulk-job-staged",
           "SCALING/RELIABILITY: a bulk job (no listener) is admitted whole at submit",
           "wire/admission.py", 'if lane != "interactive" or horizon_s <= 0:', "if horizon_s <= 0:",
           ("tests/test_admission.py::test_a_submit_admits_the_first_segments_up_to_the_horizon",
            "tests/test_admission.py::test_a_bulk_job_is_admitted_whole")),
    # -- the voice agents' socket (docs/AGENTS.md) ----------------------------------------------------------------
    Mutant("clear-keeps-the-job", "AGENTS: clear cancels the context's job (its worker stops)",
           "gateway/agents.py", "cancelled = await self._cancel_job(ctx)", "cancelled = True",
           (AGENTS + "test_clear_is_acknowledged_with_the_audio_sent_and_cancels_the_job",)),
    Mutant("flush-waits-for-the-sentence", "AGENTS/USAGE: flush speaks what is buffered now, even mid-sentence",
           "producer/core.py", "opened.buffer.take(final=close or flush)", "opened.buffer.take(final=close)",
           (AGENTS + "test_flush_mid_sentence_gives_audio_while_the_context_is_open",
            "tests/test_farm_textin.py::test_flush_queues_a_sentence_not_finished_on_both_faces")),
    Mutant("agents-socket-never-idles", "AGENTS: a socket with nothing said either way closes after agent_idle_s",
           "gateway/agents.py", "idle_s = self.gw.agent_idle_s", "idle_s = self.gw.agent_idle_s * 100",
           (AGENTS + "test_too_many_contexts_idle_timeout_and_keepalive",)),
    Mutant("request-id-not-the-job", "USAGE HTTP: an answer about a job carries the job's id as X-Request-Id",
           "gateway/state.py", "        mark_job(conn, job.id)\n", "",
           ("tests/test_gateway_request_ids.py::test_every_answer_about_a_job_carries_its_id",)),
]
