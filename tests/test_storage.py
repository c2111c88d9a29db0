"""Trial storage at a URI: where a checkpoint is named, what is fetched from it, and paths inside it.

Against a real S3 API on loopback (moto's server) and a real Ray Tune run that stores there, written
the way a user of MinIO or another S3-compatible store writes it: `s3://b/p?endpoint_override=…`.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from object_store import s3_server

from forge_ml.tuning.storage import (
    ADAPTER_FILES,
    checkpoint_location,
    copy_adapter,
    storage_child,
    unreadable_experiment,
)

SEGMENT = st.from_regex(r"[A-Za-z0-9_.-]{1,12}", fullmatch=True).filter(lambda s: s not in (".", ".."))
QUERY = st.lists(
    st.tuples(
        st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
        st.from_regex(r"[A-Za-z0-9.:_-]{1,16}", fullmatch=True),
    ),
    max_size=3,
).map(lambda pairs: "&".join(f"{k}={v}" for k, v in pairs))


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["s3://", "gs://", "file:///", "/", ""]),
    st.lists(SEGMENT, min_size=1, max_size=3),
    st.booleans(),
    QUERY,
    st.lists(SEGMENT, min_size=1, max_size=3),
)
def test_a_path_inside_storage_keeps_the_uris_query_at_its_end(scheme, base, slash, query, parts):
    """Experiment directories, shared bases: `storage_child` joins the path before a URI's query,
    never after it (`…?scheme=http/round-002` named no directory, and the round could not resume)."""
    storage = scheme + "/".join(base) + ("/" if slash else "")
    if "://" in scheme and query:
        storage += f"?{query}"
    child = storage_child(storage, *parts)
    path, _, tail = child.partition("?") if "://" in storage else (child, "", "")
    assert path == scheme + "/".join([*base, *parts])
    assert tail == (query if "://" in scheme else "")
    if scheme == "file:///":  # what Ray Tune and pyarrow open
        import pyarrow.fs

        assert pyarrow.fs.FileSystem.from_uri(child)[1] == "/" + "/".join([*base, *parts])


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with s3_server(tmp_path_factory.mktemp("s3")) as running:
        yield running


def put_checkpoint(store, prefix: str) -> dict[str, bytes]:
    """A trainer checkpoint in the bucket: the adapter and tokenizer files, and the optimizer's state."""
    files = {name: f"{name} of {prefix}".encode() for name in ADAPTER_FILES}
    files |= {"optimizer.pt": b"x" * 4096, "rng_state.pth": b"r", "trainer_state.json": b"{}"}
    fs = store.filesystem()
    for name, data in files.items():
        with fs.open_output_stream(f"{store.bucket}/{prefix}/{name}") as out:
            out.write(data)
    return files


def test_a_checkpoint_in_s3_is_named_by_a_uri_and_only_its_adapter_is_fetched(store, tmp_path, monkeypatch):
    from ray import tune

    for name, value in store.env.items():
        monkeypatch.setenv(name, value)
    prefix = "rounds/exp/trial_0/checkpoint_000002"
    files = put_checkpoint(store, prefix)
    checkpoint = tune.Checkpoint(path=f"{store.bucket}/{prefix}", filesystem=store.filesystem())

    location = checkpoint_location(store.uri("rounds"), checkpoint)
    assert location == store.uri(prefix)  # bucket, key and the endpoint: another process can open it
    copy_adapter(location, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(ADAPTER_FILES)  # no optimizer state
    assert all((tmp_path / name).read_bytes() == files[name] for name in ADAPTER_FILES)

    local = tmp_path / "local"
    local.mkdir()
    assert checkpoint_location(store.uri("rounds"), tune.Checkpoint.from_directory(str(local))) == str(local)


def test_a_round_stored_in_s3_names_its_experiment_and_checkpoints_there(store, tmp_path, monkeypatch):
    """A real Ray Tune run with `storage_path` at the store: the experiment directory forge-ml records
    for resuming is one Ray Tune can restore, and each trial's checkpoint is a URI from which the
    adapter comes back without the rest of the checkpoint (nothing downloaded to a temp directory)."""
    import ray
    from ray import tune

    for name, value in store.env.items():
        monkeypatch.setenv(name, value)

    def trainable(config):
        folder = Path(tune.get_context().get_trial_dir()) / "out"
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("adapter_config.json", "optimizer.pt"):
            (folder / name).write_text(f"{name} r={config['r']}")
        tune.report({"loss": 1.0 / config["r"]}, checkpoint=tune.Checkpoint.from_directory(str(folder)))

    storage = store.uri("rounds")
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        grid = tune.Tuner(
            trainable,
            param_space={"r": tune.grid_search([4, 8])},
            run_config=tune.RunConfig(storage_path=storage, name="exp", verbose=0),
        ).fit()
    finally:
        ray.shutdown()
    assert unreadable_experiment(storage_child(storage, "exp")) is None
    assert tune.Tuner.can_restore(storage_child(storage, "exp"))
    for result in grid:
        # what the driver's sweep of trial scratch relies on (forge_ml/tuning/runtime.py)
        assert result.metrics["pid"] > 0 and result.metrics["hostname"] == socket.gethostname()
        location = checkpoint_location(storage, result.checkpoint)
        assert location.startswith("s3://forge/rounds/exp/") and location.endswith(
            f"?endpoint_override={store.endpoint}&scheme=http"
        )
        target = tmp_path / Path(result.path).name
        target.mkdir()
        copy_adapter(location, target)
        assert [p.name for p in target.iterdir()] == ["adapter_config.json"]
        assert (target / "adapter_config.json").read_text() == f"adapter_config.json r={result.config['r']}"


def test_storage_that_is_missing_or_unreachable_is_refused_before_any_work(store, monkeypatch):
    """A bucket that does not exist is the user's to fix (exit 1); an endpoint that does not answer is
    a runtime fault (exit 2). Both name tune.storage_path; a bucket that exists passes."""
    from mlflow_server import free_port

    from forge_ml.errors import ConfigError, RuntimeFault
    from forge_ml.tuning.storage import check_storage

    for name, value in store.env.items():
        monkeypatch.setenv(name, value)
    check_storage(store.uri("rounds"))
    missing = store.uri("rounds").replace("s3://forge/", "s3://no-such-bucket/")
    with pytest.raises(
        ConfigError, match=r"tune\.storage_path: .*bucket 'no-such-bucket' does not exist"
    ) as info:
        check_storage(missing)
    assert info.value.exit_code == 1
    unreachable = store.uri("rounds").replace(store.endpoint, f"127.0.0.1:{free_port()}")
    with pytest.raises(
        RuntimeFault, match=re.escape("tune.storage_path: cannot reach s3://forge/rounds")
    ) as info:
        check_storage(unreachable)
    assert info.value.exit_code == 2
