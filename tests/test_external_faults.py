"""External faults and concurrency: the Anthropic API and MLflow failing under forge-ml, many writers at once.

- The planner drives the real `anthropic` SDK against the loopback fake of the Messages API
  (tests/fake_anthropic.py): rate limits, overload, server errors, garbage, truncation and a slow
  reply must each end in Claude's plan after a bounded retry or in the offline plan with the reason.
- `forge-ml` pointed at an MLflow URI where no server answers must stop at once with exit 2 and
  the URI in the message, never hang in MLflow's own HTTP retries.
- Eight processes writing metrics through `TrackedRun.log_metrics` to one real `mlflow server`
  lose nothing: every (key, step, value) is read back.
"""

from __future__ import annotations

import itertools
import json
import logging
import multiprocessing
import socket
import time

import pytest
from conftest import FAST, run_cli
from fake_anthropic import FakeAnthropic, Reply, error_reply, message_body
from mlflow import MlflowClient
from mlflow_server import (
    free_port,
    log_metrics_child,
    server_up,
    start_mlflow_server,
    stop,
    value_of,
    wait_for,
)
from test_planner import VALID

from forge_ml.compose import compose_config
from forge_ml.errors import RuntimeFault
from forge_ml.flywheel_state import PlannerRecord
from forge_ml.planner import RoundPlanner
from forge_ml.planner.history import History
from forge_ml.planner.offline import offline_plan
from forge_ml.project import Project, init_project
from forge_ml.tracking import check_server, ensure_experiment

pytestmark = pytest.mark.reliability

API = "Anthropic API faults"
MLFLOW = "MLflow faults"
CONCURRENCY = "Concurrency"
KEY = "sk-ant-test-0123456789abcdef"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Project:
    """The drone-router example; planning only reads it, so one copy serves the module."""
    return init_project(tmp_path_factory.mktemp("faults") / "drone-router", example="drone-router")


@pytest.fixture
def fake(monkeypatch):
    with FakeAnthropic() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        yield server


def plan_round(project: Project, *overrides: str, planner: RoundPlanner | None = None, round_number: int = 1):
    """Plan one round with Claude (planner.backend=claude); return (cfg, planner, outcome, seconds taken)."""
    cfg = compose_config(project, ["planner=claude", *overrides])
    planner = planner or RoundPlanner(cfg, project)
    started = time.monotonic()
    outcome = planner.plan(cfg, History(), round_number)
    return cfg, planner, outcome, time.monotonic() - started


def gaps(fake: FakeAnthropic) -> list[float]:
    """Seconds between consecutive requests the fake received: the pauses before retries."""
    times = [r.at for r in fake.requests]
    return [later - earlier for earlier, later in itertools.pairwise(times)]


def offline(cfg, round_number: int = 1):
    """The offline plan for a round with no history (what a fallback must apply)."""
    return offline_plan(cfg, History(), round_number=round_number)


def claude_applied(outcome) -> bool:
    """Claude's plan (VALID) is the outcome; compared by field, as validating again costs ~1 s."""
    plan = outcome.plan
    return (
        outcome.source == "claude"
        and not outcome.fallback
        and (plan.hypothesis, plan.search_space, plan.num_samples, plan.fixed_overrides)
        == (VALID["hypothesis"], VALID["search_space"], VALID["num_samples"], VALID["fixed_overrides"])
    )


# -- the Anthropic API ----------------------------------------------------------------------------------
def test_a_429_with_retry_after_is_waited_out_then_claude_plans(fake, project, proof):
    fake.script(error_reply(429, "rate_limit_error", "rate limit exceeded", {"retry-after": "1"}))
    fake.on_tool("propose_experiment", lambda body: VALID)
    _, _, outcome, _ = plan_round(project, "planner.max_retries=2", "planner.timeout_s=5")
    assert claude_applied(outcome)
    (waited,) = gaps(fake)
    # The SDK's own first backoff is at most 0.5 s; waiting ~1 s means it obeyed retry-after.
    assert 0.95 <= waited < 2.0
    assert fake.requests[1].headers["x-stainless-retry-count"] == "1"
    proof(
        API,
        "429 rate_limit_error with retry-after: 1",
        f"{fake.count('/v1/messages')} requests, retried after {waited:.2f} s, Claude's plan applied",
    )


def test_a_retry_after_of_an_hour_is_cut_to_max_retry_wait_s(fake, project, proof):
    fake.script(error_reply(429, "rate_limit_error", "rate limit exceeded", {"retry-after": "3600"}))
    fake.on_tool("propose_experiment", lambda body: VALID)
    _, _, outcome, _ = plan_round(
        project, "planner.max_retries=2", "planner.timeout_s=5", "planner.max_retry_wait_s=1"
    )
    assert claude_applied(outcome)
    (waited,) = gaps(fake)
    assert 0.95 <= waited < 2.0
    proof(
        API,
        "429 with retry-after: 3600 (an hour), planner.max_retry_wait_s=1",
        f"retried after {waited:.2f} s, not an hour; Claude's plan applied",
    )


@pytest.mark.parametrize(
    ("status", "kind"), [(529, "overloaded_error"), (500, "api_error")], ids=["529-overloaded", "500"]
)
def test_one_overload_or_server_error_is_retried_with_backoff_then_claude_plans(
    fake, project, proof, status, kind
):
    fake.script(error_reply(status, kind, "try again"))
    fake.on_tool("propose_experiment", lambda body: VALID)
    _, _, outcome, _ = plan_round(project, "planner.max_retries=2", "planner.timeout_s=5")
    assert claude_applied(outcome)
    (waited,) = gaps(fake)
    assert 0.3 <= waited < 1.5  # the SDK's first backoff: 0.5 s less up to 25 % jitter
    proof(
        API,
        f"{status} {kind} once, then success",
        f"{fake.count('/v1/messages')} requests, retried after {waited:.2f} s backoff, Claude's plan applied",
    )


def test_500_every_time_falls_back_after_the_configured_retries(fake, project, proof, caplog):
    caplog.set_level(logging.INFO, logger="forge_ml.planner")
    fake.on_tool("propose_experiment", lambda body: Reply(status=500))
    cfg, planner, outcome, _ = plan_round(project, "planner.max_retries=2", "planner.timeout_s=5")
    requests = fake.count("/v1/messages")
    assert requests == 1 + 2  # the first try and planner.max_retries retries, no more
    backoff = sum(gaps(fake))
    assert backoff < 0.5 + 1.0 + 1.0  # the SDK's two backoffs (<= 0.5 s, <= 1 s) and some slack
    assert outcome.source == "offline" and outcome.fallback
    assert outcome.plan == offline(cfg)
    assert outcome.reason.startswith("request failed: InternalServerError")
    assert PlannerRecord.of(outcome, cfg).label == "offline (fallback)"
    assert "falling back to the offline plan" in caplog.text
    assert KEY not in outcome.reason and KEY not in caplog.text
    assert planner.backend == "claude"  # a server error ends this request only, not Claude's part
    proof(
        API,
        "500 on every request (planner.max_retries=2)",
        f"{requests} requests over {backoff:.1f} s of backoff, then the offline plan; "
        f"reason: {outcome.reason[:60]!r}",
    )


def test_an_unreachable_api_falls_back_after_the_retries(monkeypatch, project, proof):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens
    cfg, _, outcome, elapsed = plan_round(project, "planner.max_retries=2", "planner.timeout_s=5")
    assert outcome.source == "offline" and outcome.fallback
    assert outcome.reason.startswith("request failed: APIConnectionError")
    assert outcome.plan == offline(cfg)
    assert elapsed < 5  # three refused connections and two backoffs (~0.5 s, ~1 s)
    proof(API, "API unreachable (connection refused)", f"offline plan after {elapsed:.1f} s (3 attempts)")


def test_a_reply_that_is_not_json_falls_back_without_a_retry(fake, project, proof):
    fake.script(Reply(body='{"type": "message", "content": [{"type": "tool_use", "input": {"hyp'))
    cfg, _, outcome, _ = plan_round(project, "planner.max_retries=2", "planner.timeout_s=5")
    assert outcome.source == "offline" and outcome.fallback
    assert "malformed reply" in outcome.reason
    assert outcome.plan == offline(cfg)
    assert fake.count("/v1/messages") == 1  # a 200 is not retried
    proof(
        API,
        "200 whose body is cut-off JSON",
        f"{fake.count('/v1/messages')} request, offline plan; reason: {outcome.reason[:50]!r}",
    )


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")  # a str where a dict belongs
def test_tool_input_that_is_broken_json_text_goes_back_once_then_falls_back(fake, project, proof):
    body = message_body(Reply(tool="propose_experiment"), "claude-fake")
    body["content"][0]["input"] = '{"hypothesis": "wider", "search_space": {"lora.r": "choice(8,'
    fake.script(Reply(body=body), Reply(body=body))
    cfg, _, outcome, _ = plan_round(project, "planner.max_retries=2", "planner.timeout_s=5")
    assert outcome.source == "offline" and outcome.fallback
    assert "the plan must be a JSON object, got str" in outcome.reason
    assert outcome.plan == offline(cfg)
    repair = fake.requests[1].body["messages"][2]["content"][0]
    assert repair["is_error"] is True and "JSON object" in repair["content"]
    proof(
        API,
        "tool input that is malformed JSON text, twice",
        f"{fake.count('/v1/messages')} requests (one repair turn), offline plan; "
        f"reason: {outcome.reason[:70]!r}",
    )


def test_truncated_tool_input_is_repaired_once_or_falls_back(fake, project, proof):
    cut = Reply(tool="propose_experiment", tool_input={"hypothesis": "cut"}, stop_reason="max_tokens")
    fake.script(cut, Reply(tool="propose_experiment", tool_input=VALID))
    cfg, _, repaired, _ = plan_round(project, "planner.max_retries=0", "planner.timeout_s=5")
    assert claude_applied(repaired)
    assert "stop_reason max_tokens" in fake.requests[1].body["messages"][2]["content"][0]["content"]
    fake.script(cut, cut)
    _, _, outcome, _ = plan_round(project, "planner.max_retries=0", "planner.timeout_s=5")
    assert outcome.source == "offline" and outcome.fallback and "max_tokens" in outcome.reason
    assert outcome.plan == offline(cfg)
    assert fake.count("/v1/messages") == 4
    proof(
        API,
        "tool input cut off (stop_reason max_tokens)",
        "cut once: 2 requests, the repaired plan applied; cut twice: 2 requests, offline plan "
        f"({outcome.reason[:60]!r})",
    )


def test_a_reply_slower_than_the_timeout_falls_back_for_that_round_within_the_bound(fake, project, proof):
    timeout_s, retries = 0.5, 1
    slow = Reply(tool="propose_experiment", tool_input=VALID, delay_s=10)
    fake.script(*[slow] * (1 + retries))
    fake.on_tool("propose_experiment", lambda body: VALID)
    overrides = (f"planner.timeout_s={timeout_s}", f"planner.max_retries={retries}")
    cfg, planner, first, _ = plan_round(project, *overrides)
    waited = time.monotonic() - fake.requests[0].at  # from the first request to the fallback plan
    attempts = fake.count("/v1/messages")
    assert attempts == 1 + retries
    assert first.source == "offline" and first.fallback and "APITimeoutError" in first.reason
    assert first.plan == offline(cfg)
    bound = timeout_s * attempts + 0.5 * retries  # each attempt's timeout and the SDK's backoff (<= 0.5 s)
    assert timeout_s * attempts - 0.05 <= waited < bound + 1.0
    _, _, second, _ = plan_round(project, *overrides, planner=planner, round_number=2)
    assert second.source == "claude" and not second.fallback  # a timeout does not disable Claude
    proof(
        API,
        f"reply slower than planner.timeout_s={timeout_s} (max_retries={retries})",
        f"{attempts} attempts, offline plan {waited:.2f} s after the first request "
        f"(timeouts + backoff: at most {bound:.1f} s); "
        "next round planned by Claude",
    )


# -- MLflow: no server at tracking.uri ------------------------------------------------------------------
@pytest.mark.parametrize("command", ["train", "flywheel"])
def test_no_mlflow_server_at_the_uri_fails_fast_with_exit_2_naming_it(small_project, proof, command):
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    extra = ["planner=offline"] if command == "flywheel" else []
    env = {"MLFLOW_TRACKING_USERNAME": "bob", "MLFLOW_TRACKING_PASSWORD": "hunter2-not-to-be-seen"}
    started = time.monotonic()
    result = run_cli(
        "-p", str(small_project.root), "--json", command, f"tracking.uri={uri}", *extra, *FAST,
        env=env, timeout=120,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    message = json.loads(result.stdout)["error"]["message"]
    assert result.returncode == 2, result.stderr[-3000:]
    assert message.startswith(f"tracking.uri={uri}: no MLflow server answers ([Errno 111] Connection refused")
    assert message.endswith("start it or fix tracking.uri")
    assert "Traceback" not in result.stderr and "hunter2" not in result.stdout + result.stderr
    assert elapsed < 60  # MLflow's own retries would take over 4 minutes (60 s: room for a loaded CI machine)
    assert not list((small_project.root / "output").rglob("adapter_model.safetensors"))  # nothing trained
    proof(
        MLFLOW, f"`forge-ml {command}`, no server at tracking.uri", f"exit 2 after {elapsed:.1f} s: {message}"
    )


def test_credentials_in_the_tracking_uri_are_refused_or_redacted(small_project, proof):
    uri = f"http://bob:hunter2@127.0.0.1:{free_port()}"
    result = run_cli("-p", str(small_project.root), "train", f"tracking.uri={uri}", *FAST, timeout=120)
    assert result.returncode == 1 and "credentials do not belong in the URI" in result.stderr
    assert "hunter2" not in result.stdout + result.stderr
    with pytest.raises(RuntimeFault) as info:  # a URI that reached the check anyway (e.g. from code)
        check_server(uri, attempts=1)
    assert "hunter2" not in str(info.value) and "no MLflow server answers" in str(info.value)
    proof(
        MLFLOW,
        "user:password in tracking.uri",
        f"CLI: exit {result.returncode}, refused as bad config; check_server's message: {str(info.value)[:60]!r}"
        " (password absent from both)",
    )


def test_a_server_that_accepts_but_never_answers_times_out_per_attempt(proof):
    with socket.socket() as silent:  # listens (the kernel completes connects) but never accepts or answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(RuntimeFault, match=r"read timeout=0\.5") as info:
            check_server(uri, attempts=2, timeout_s=0.5)
        elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 1.5 + 1.5  # two timeouts and one 0.5 s pause
    assert info.value.exit_code == 2
    proof(
        MLFLOW,
        "server accepts connections, never answers",
        f"exit-2 fault after {elapsed:.1f} s: {info.value}",
    )


# -- Concurrency: many writers, one mlflow server -------------------------------------------------------
WRITERS = 8
KEYS = ["train/loss", "train/grad_norm", "train/learning_rate", "train/epoch"]
STEPS = 50  # one log_metrics call per step with all KEYS: 200 metric values per writer
TOTAL = WRITERS * len(KEYS) * STEPS


@pytest.fixture(scope="module", autouse=True)
def _booting_server(request, tmp_path_factory):
    """Start the module's `mlflow server` first thing, if a test here uses it, so that it boots while the
    other tests run: (process, uri). Two worker processes, so two writers share the sqlite store."""
    wanted = any(
        "server" in item.fixturenames for item in request.session.items if item.module is request.module
    )
    if not wanted:
        yield None
        return
    port = free_port()
    process = start_mlflow_server(tmp_path_factory.mktemp("mlflow-server"), port, workers=2)
    try:
        yield process, f"http://127.0.0.1:{port}"
    finally:
        stop(process)


@pytest.fixture(scope="module")
def server(_booting_server) -> str:
    """The URI of a real `mlflow server` (sqlite store, served artifacts) on loopback, once it answers."""
    process, uri = _booting_server
    wait_for(lambda: process.poll() is None and server_up(uri), "mlflow server")
    return uri


@pytest.fixture(scope="module")
def writers():
    """Start writer processes from a fork server that has mlflow and forge_ml imported (no HTTP state)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["mlflow", "forge_ml.tracking", "mlflow_server"])

    def run(uri: str, jobs: list[tuple[str, list[int]]]) -> float:
        start = ctx.Barrier(len(jobs))
        processes = [
            ctx.Process(target=log_metrics_child, args=(uri, run_id, KEYS, steps, start))
            for run_id, steps in jobs
        ]
        started = time.monotonic()
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=180)
        elapsed = time.monotonic() - started
        assert [p.exitcode for p in processes] == [0] * len(jobs)
        return elapsed

    return run


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_eight_processes_each_logging_200_metrics_to_their_own_run_lose_nothing(server, writers, proof):
    client = MlflowClient(tracking_uri=server)
    experiment = ensure_experiment(client, "concurrency-own-runs")
    run_ids = [client.create_run(experiment, run_name=f"writer-{i}").info.run_id for i in range(WRITERS)]
    elapsed = writers(server, [(run_id, list(range(STEPS))) for run_id in run_ids])
    expected = sorted((step, value_of(key, step)) for key in KEYS for step in range(STEPS))
    found = 0
    for run_id in run_ids:
        got = sorted(pair for key in KEYS for pair in history(client, run_id, key))
        assert got == expected  # every (step, value), none twice
        found += len(got)
    assert found == TOTAL
    proof(
        CONCURRENCY,
        f"{WRITERS} processes x {len(KEYS) * STEPS} metrics, one run each (TrackedRun.log_metrics)",
        f"{found} of {TOTAL} (key, step, value) read back, 0 lost, 0 duplicated; {elapsed:.1f} s wall",
    )


def test_eight_processes_logging_into_one_shared_run_lose_nothing(server, writers, proof):
    client = MlflowClient(tracking_uri=server)
    experiment = ensure_experiment(client, "concurrency-shared-run")
    run_id = client.create_run(experiment, run_name="shared").info.run_id
    jobs = [(run_id, list(range(i * STEPS, (i + 1) * STEPS))) for i in range(WRITERS)]
    elapsed = writers(server, jobs)
    found = 0
    for key in KEYS:
        got = history(client, run_id, key)
        assert got == [(step, value_of(key, step)) for step in range(WRITERS * STEPS)]
        found += len(got)
    assert found == TOTAL
    latest = client.get_run(run_id).data.metrics
    assert latest == {key: value_of(key, WRITERS * STEPS - 1) for key in KEYS}  # the highest step wins
    proof(
        CONCURRENCY,
        f"{WRITERS} processes into one run, distinct steps ({len(KEYS) * STEPS} metrics each)",
        f"{found} of {TOTAL} (key, step, value) read back, 0 lost, 0 duplicated, latest = last step; "
        f"{elapsed:.1f} s wall",
    )
