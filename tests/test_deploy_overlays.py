"""The overlays under deploy/ that build on the base files (tests/test_deploy.py checks those): Redis with Sentinel
(deploy/k8s/sentinel, docker-compose.sentinel.yml), shards (deploy/k8s/shards, docker-compose.shards.yml) and
several worker processes per GPU under CUDA MPS (deploy/k8s/gpu-mps), each checked offline against the schemas and
against the settings the code reads from them."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from wire.settings import load_settings
from tests.test_deploy import DATA, DEPLOY, K8S_VERSION, _compose, _docs, _k8s, _one, _validator


# -- redis with sentinel ---------------------------------------------------------------------------
def _overlay(name: str, patches: set[str]) -> dict[str, list[dict[str, Any]]]:
    """The documents of each file of deploy/k8s/NAME, after checking that its kustomization builds on the base with
    these patches."""
    files = {p.name: _docs(p) for p in sorted((DEPLOY / "k8s" / name).glob("*.yaml"))}
    (kust,) = files["kustomization.yaml"]
    assert kust["resources"][0] == "../" and all((DEPLOY / "k8s" / name / r).exists() for r in kust["resources"])
    assert {p["path"] for p in kust["patches"]} == patches
    return files


def _sentinel_url_in_secret_example() -> str:
    text = (DEPLOY / "k8s" / "secret.example.yaml").read_text()
    (url,) = re.findall(r'# TTSFARM_REDIS_URL: "(sentinel://[^"]+)"', text)
    return url


def test_sentinel_overlay_matches_the_schemas_and_builds_on_the_base() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (test extra)")
    files = _overlay("sentinel", {"settings-patch.yaml", "keda-patch.yaml"})
    kinds = []
    for doc in files["redis-sentinel.yaml"]:
        kv.validate(doc, K8S_VERSION, strict=True)
        kinds.append(doc["kind"])
    assert sorted(kinds) == ["ConfigMap", "PodDisruptionBudget", "Service", "StatefulSet"]
    # the patched ScaledObject (a custom resource's list is replaced whole) is a valid one
    (patch,) = files["keda-patch.yaml"]
    merged = json.loads(json.dumps(_one("ScaledObject")))
    merged["spec"]["triggers"] = patch["spec"]["triggers"]
    errors = list(_validator(DATA / "keda" / "scaledobject.schema.json").iter_errors(merged))
    assert not errors, "; ".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    broken = json.loads(json.dumps(merged))
    broken["spec"]["triggers"][0]["metadata"]["sentinelmaster"] = "ttsfarm"  # misspelt: caught
    assert list(_validator(DATA / "keda" / "scaledobject.schema.json").iter_errors(broken))


def test_sentinel_overlay_points_workers_and_keda_at_the_group() -> None:
    from wire.redis.connect import SentinelUrl

    files = _overlay("sentinel", {"settings-patch.yaml", "keda-patch.yaml"})
    (settings_patch,) = files["settings-patch.yaml"]
    data = {**_one("ConfigMap", "ttsfarm-settings")["data"], **settings_patch["data"]}
    url = _sentinel_url_in_secret_example()
    settings = load_settings(env={"TTSFARM_REDIS_URL": url, **{k: v for k, v in data.items() if k.startswith("TTSFARM_")}})
    assert settings.redis.wait_replicas >= 1
    docs = {d["kind"]: d for d in files["redis-sentinel.yaml"]}
    sts, svc, scripts = docs["StatefulSet"], docs["Service"], docs["ConfigMap"]["data"]
    # the URL lists each pod's Sentinel by its stable name under the headless Service
    pods = {f"{sts['metadata']['name']}-{i}.{svc['metadata']['name']}.ttsfarm.svc.cluster.local"
            for i in range(sts["spec"]["replicas"])}
    parsed = SentinelUrl.parse(url)
    assert {h for h, _ in parsed.sentinels} == pods and {p for _, p in parsed.sentinels} == {26379}
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"] and svc["spec"]["clusterIP"] == "None"
    assert f"sentinel monitor {settings.redis.master_name} $MASTER 6379 2" in scripts["sentinel.sh"]
    assert sts["spec"]["replicas"] == 3  # a quorum of 2 survives one lost pod
    containers = {c["name"]: c for c in sts["spec"]["template"]["spec"]["containers"]}
    assert {"redis", "sentinel"} == set(containers)
    secret = next(d for _, d in _k8s() if d["kind"] == "Secret" and d["metadata"]["name"] == "ttsfarm-credentials")
    for c in containers.values():
        (ref,) = [e["valueFrom"]["secretKeyRef"] for e in c["env"] if e["name"] == "REDIS_PASSWORD"]
        assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
    # KEDA: the same streams as the base, through the Sentinels the ConfigMap lists
    (patch,) = files["keda-patch.yaml"]
    base = sorted(t["metadata"]["stream"] for t in _one("ScaledObject")["spec"]["triggers"])
    assert sorted(t["metadata"]["stream"] for t in patch["spec"]["triggers"]) == base
    for t in patch["spec"]["triggers"]:
        md = t["metadata"]
        assert t["type"] == "redis-sentinel-streams" and md["sentinelMaster"] == settings.redis.master_name
        assert {a.split(":")[0] for a in data[md["addressesFromEnv"]].split(",")} == pods


def _compose_sentinel() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.sentinel.yml").read_text())


def test_compose_sentinel_file_matches_the_spec_and_wires_the_group() -> None:
    from wire.redis.connect import SentinelUrl

    over = _compose_sentinel()
    errors = sorted(_validator(DATA / "compose-spec" / "compose-spec.json").iter_errors(over), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    services = {**_compose()["services"], **over["services"]}
    sentinels = [name for name in over["services"] if name.startswith("sentinel-")]
    assert len(sentinels) == 3 and "redis-replica" in over["services"]
    assert "--replicaof redis 6379" in " ".join(over["services"]["redis-replica"]["command"])
    for name in _farm_services():
        env = {**services[name].get("environment", {}), **over["services"][name]["environment"]}
        settings = load_settings(env={k: v for k, v in env.items() if k.startswith("TTSFARM_")})
        parsed = SentinelUrl.parse(settings.redis.url)
        assert sorted(h for h, _ in parsed.sentinels) == sorted(sentinels), name
        assert parsed.password and settings.redis.wait_replicas == 1
        script = " ".join(over["services"][sentinels[0]]["command"])
        assert f"sentinel monitor {settings.redis.master_name} redis 6379 2" in script


def _farm_services() -> list[str]:
    """The base compose services that reach the farm's Redis (those that carry the farm's settings)."""
    return [name for name, svc in _compose()["services"].items()
            if isinstance(svc.get("environment"), dict) and "TTSFARM_REDIS_URL" in svc["environment"]]


def test_compose_shards_file_matches_the_spec_and_gives_every_farm_service_the_nodes() -> None:
    from wire.connect import connect
    from wire.shards import ShardedBroker

    over = yaml.safe_load((DEPLOY / "docker-compose.shards.yml").read_text())
    errors = sorted(_validator(DATA / "compose-spec" / "compose-spec.json").iter_errors(over), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    nodes = sorted(name for name in over["services"] if name.startswith("redis-shard-"))
    assert nodes == ["redis-shard-1", "redis-shard-2"]
    base = _compose()["services"]
    assert set(_farm_services()) >= {"worker", "grpc", "flower"}
    for name in _farm_services():  # every service that reaches Redis reaches all three nodes
        env = {**base[name]["environment"], **over["services"][name]["environment"]}
        settings = load_settings(env={k: v for k, v in env.items() if k.startswith("TTSFARM_")})
        assert [u.split("@")[1].split(":")[0] for u in settings.redis.shards] == nodes, name
        assert isinstance(connect(settings.redis), ShardedBroker)
    for node in nodes:
        assert "--appendonly yes" in " ".join(over["services"][node]["command"])


def test_shards_overlay_matches_the_schemas_and_scales_on_every_shard() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (test extra)")
    files = _overlay("shards", {"settings-patch.yaml", "keda-patch.yaml"})
    docs = {d["kind"]: d for d in files["redis-shards.yaml"]}
    for doc in docs.values():
        kv.validate(doc, K8S_VERSION, strict=True)
    sts, svc = docs["StatefulSet"], docs["Service"]
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"] and svc["spec"]["clusterIP"] == "None"
    # the shard URLs of the Secret example name the StatefulSet's pods, one each, after the base's Redis
    text = (DEPLOY / "k8s" / "secret.example.yaml").read_text()
    (shards,) = re.findall(r'# TTSFARM_REDIS_SHARDS: "([^"]+)"', text)
    settings = load_settings(env={"TTSFARM_REDIS_URL": "redis://:x@redis.ttsfarm.svc.cluster.local:6379/0",
                                  "TTSFARM_REDIS_SHARDS": shards})
    pods = [f"{sts['metadata']['name']}-{i}.{svc['metadata']['name']}.ttsfarm.svc.cluster.local"
            for i in range(sts["spec"]["replicas"])]
    assert [u.split("@")[1].split(":")[0] for u in settings.redis.shards] == pods
    # KEDA: every base trigger once per shard, at the base's count divided by the shards
    (settings_patch,) = files["settings-patch.yaml"]
    addresses = {"REDIS_ADDRESS": _one("ConfigMap", "ttsfarm-settings")["data"]["REDIS_ADDRESS"], **settings_patch["data"]}
    assert sorted(a.split(":")[0] for k, a in addresses.items() if k != "REDIS_ADDRESS") == pods
    (patch,) = files["keda-patch.yaml"]
    n = 1 + len(pods)
    base = _one("ScaledObject")["spec"]["triggers"]
    by_address: dict[str, list[dict[str, Any]]] = {}
    for t in patch["spec"]["triggers"]:
        by_address.setdefault(t["metadata"]["addressFromEnv"], []).append(t)
    assert sorted(by_address) == sorted(addresses)
    for triggers in by_address.values():
        assert sorted(t["metadata"]["stream"] for t in triggers) == sorted(t["metadata"]["stream"] for t in base)
        for t, b in zip(sorted(triggers, key=lambda t: t["metadata"]["stream"]), sorted(base, key=lambda t: t["metadata"]["stream"])):
            for key in ("lagCount", "streamLength"):
                if key in b["metadata"]:
                    assert int(t["metadata"][key]) == max(1, round(int(b["metadata"][key]) / n)), (t, key)
    merged = json.loads(json.dumps(_one("ScaledObject")))
    merged["spec"]["triggers"] = patch["spec"]["triggers"]
    errors = list(_validator(DATA / "keda" / "scaledobject.schema.json").iter_errors(merged))
    assert not errors, "; ".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


# -- several worker processes per GPU under MPS ------------------------------------------------------
def test_gpu_mps_overlay_matches_the_schemas_and_sets_the_measured_layout() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (test extra)")
    files = _overlay("gpu-mps", {"settings-patch.yaml", "worker-patch.yaml"})
    assert files["kustomization.yaml"][0]["resources"] == ["../"]
    (patch,) = files["settings-patch.yaml"]
    (plugin,) = files["device-plugin-mps.yaml"]
    for doc in (patch, plugin):
        kv.validate(doc, K8S_VERSION, strict=True)
    base = _one("ConfigMap", "ttsfarm-settings")
    assert patch["metadata"]["name"] == base["metadata"]["name"] and set(patch["data"]) <= set(base["data"]) | {"TTSFARM_QUEUE_INFERENCE_THREADS"}
    # the worker reads the merged settings: two loops (one of them the reserved interactive loop), the 50 ms window,
    # one finisher process (a third of the base's two: the pod makes a third of the GPU's audio)
    env = {k: v for k, v in {**base["data"], **patch["data"]}.items() if k.startswith("TTSFARM_")}
    settings = load_settings(env=env)
    assert settings.queue.inference_threads == 2 and settings.queue.window_ms == 50
    assert settings.queue.inference_threads > settings.queue.interactive_loops
    assert settings.queue.finisher_processes == settings.queue.finisher_threads == 1
    # the worker patch (a strategic merge: the container by name) asks for fewer cores than the base's pod
    (worker,) = files["worker-patch.yaml"]
    base_dep = _one("Deployment", "ttsfarm-worker")
    assert (worker["kind"], worker["metadata"]["name"]) == (base_dep["kind"], base_dep["metadata"]["name"])
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    (base_container,) = base_dep["spec"]["template"]["spec"]["containers"]
    assert container["name"] == base_container["name"]
    assert int(container["resources"]["requests"]["cpu"]) < int(base_container["resources"]["requests"]["cpu"])
    assert int(container["resources"]["requests"]["cpu"]) >= 1 + settings.queue.finisher_processes
    # the device plugin shares each GPU among as many pods as the comments say, through MPS
    config = yaml.safe_load(plugin["data"]["config.yaml"])
    (resource,) = config["sharing"]["mps"]["resources"]
    assert resource["name"] == "nvidia.com/gpu" and resource["replicas"] == 3
    assert "three worker pods" in (DEPLOY / "k8s" / "gpu-mps" / "kustomization.yaml").read_text()
