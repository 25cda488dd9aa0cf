"""deploy/k8s: every manifest parses, the expected objects exist and are wired to each other."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import DEPLOY, K8S, load_yaml_documents

WORKLOADS = {"Deployment", "StatefulSet", "Job", "CronJob"}
PLACEHOLDER_VALUES = {"", "REPLACE_ME"}
#: Example Secrets, in no kustomization: `kubectl apply -k` must never write a Secret.
SECRETS_EXAMPLE = K8S / "secrets-example"


def _manifest_files() -> list[Path]:
    return sorted(
        p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml" and SECRETS_EXAMPLE not in p.parents
    )


@pytest.fixture(scope="module")
def applied() -> list[dict[str, Any]]:
    """What `kubectl apply -k deploy/k8s` writes."""
    return [doc for path in _manifest_files() for doc in load_yaml_documents(path)]


@pytest.fixture(scope="module")
def objects(applied: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The applied objects plus the Secrets an operator creates from secrets-example/."""
    examples = [doc for path in sorted(SECRETS_EXAMPLE.glob("*.yaml")) for doc in load_yaml_documents(path)]
    return applied + examples


def _find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, (kind, name, len(matches))
    return matches[0]


def _pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec = workload["spec"]["jobTemplate"]["spec"] if workload["kind"] == "CronJob" else workload["spec"]
    return spec["template"]["spec"]


def _containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = _pod_spec(workload)
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_every_manifest_parses_and_names_itself(objects: list[dict[str, Any]]) -> None:
    assert objects
    for obj in objects:
        assert {"apiVersion", "kind", "metadata"} <= obj.keys(), obj
        assert obj["metadata"]["name"]
    keys = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(keys) == len(set(keys)), "duplicate objects"


def test_kustomizations_list_every_manifest_once() -> None:
    listed: list[Path] = []
    for kustomization in K8S.rglob("kustomization.yaml"):
        [config] = load_yaml_documents(kustomization)
        for resource in config["resources"]:
            target = (kustomization.parent / resource).resolve()
            assert target.exists(), (kustomization, resource)
            if target.is_file():
                listed.append(target)
            else:
                assert (target / "kustomization.yaml").is_file(), target
    assert sorted(listed) == [p.resolve() for p in _manifest_files()]


def test_expected_objects(objects: list[dict[str, Any]]) -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert kinds >= {
        ("Namespace", "turngate"),
        ("Deployment", "turngate-worker"),
        ("Deployment", "turngate-api"),
        ("Service", "turngate-api"),
        ("ConfigMap", "turngate-config"),
        ("Secret", "turngate-secrets"),
        ("StatefulSet", "postgresql"),
        ("Service", "postgresql"),
        ("Deployment", "temporal"),
        ("Service", "temporal"),
        ("Job", "temporal-namespace"),
        ("Deployment", "temporal-ui"),
        ("StatefulSet", "minio"),
        ("Service", "minio"),
        ("Deployment", "redis"),
    }
    turngate = [
        o
        for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["labels"].get("app.kubernetes.io/name") == "turngate"
    ]
    assert sorted(o["metadata"]["labels"]["app.kubernetes.io/component"] for o in turngate) == [
        "api",
        "worker",
    ]


def test_worker_and_api_are_separate_deployments_of_one_image(objects: list[dict[str, Any]]) -> None:
    worker = _find(objects, "Deployment", "turngate-worker")
    api = _find(objects, "Deployment", "turngate-api")
    [worker_container] = _pod_spec(worker)["containers"]
    [api_container] = _pod_spec(api)["containers"]
    assert worker_container["image"] == api_container["image"] == "turngate"
    assert worker_container["args"] == ["worker"]
    assert api_container["args"] == ["serve", "--host", "0.0.0.0", "--port", "8010"]
    assert worker_container["ports"] == [{"name": "metrics", "containerPort": 9464}]
    assert api_container["ports"] == [{"name": "http", "containerPort": 8010}]
    for deployment in (worker, api):
        assert deployment["spec"]["replicas"] >= 2
    [app_kustomization] = load_yaml_documents(K8S / "app" / "kustomization.yaml")
    assert [image["name"] for image in app_kustomization["images"]] == ["turngate"]


def test_api_probes_use_healthz(objects: list[dict[str, Any]]) -> None:
    [api] = _pod_spec(_find(objects, "Deployment", "turngate-api"))["containers"]
    assert api["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert api["livenessProbe"]["tcpSocket"] == {"port": "http"}
    assert api["startupProbe"]["tcpSocket"] == {"port": "http"}
    service = _find(objects, "Service", "turngate-api")
    assert service["spec"]["ports"][0]["targetPort"] == "http"


def test_worker_probes_use_its_healthz(objects: list[dict[str, Any]]) -> None:
    [worker] = _pod_spec(_find(objects, "Deployment", "turngate-worker"))["containers"]
    env = {variable["name"]: variable.get("value") for variable in worker["env"]}
    assert env["TURNGATE_WORKER_METRICS_BIND"] == "0.0.0.0:9464"
    assert worker["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert worker["livenessProbe"]["tcpSocket"] == {"port": "metrics"}


def test_no_secret_is_applied_by_kustomize(applied: list[dict[str, Any]]) -> None:
    """A placeholder Secret in a kustomization would overwrite the real one on every apply."""
    assert not [o["metadata"]["name"] for o in applied if o["kind"] == "Secret"]
    names = {o["metadata"]["name"] for o in load_yaml_documents_all(SECRETS_EXAMPLE)}
    assert names == {
        "turngate-secrets",
        "turngate-owner-db",
        "turngate-encryption-keys",
        "postgres-credentials",
        "minio-credentials",
    }


def load_yaml_documents_all(directory: Path) -> list[dict[str, Any]]:
    return [doc for path in sorted(directory.glob("*.yaml")) for doc in load_yaml_documents(path)]


def test_the_app_comes_up_secure(objects: list[dict[str, Any]]) -> None:
    config = _find(objects, "ConfigMap", "turngate-config")["data"]
    assert config["TURNGATE_AUTH"] == "keys"
    keys_file = Path(config["TURNGATE_ENCRYPTION_KEYS_FILE"])
    for name in ("turngate-worker", "turngate-api"):
        spec = _pod_spec(_find(objects, "Deployment", name))
        [container] = spec["containers"]
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["encryption-keys"]["mountPath"] == str(keys_file.parent)
        assert mounts["encryption-keys"]["readOnly"] is True
        volume = next(v for v in spec["volumes"] if v["name"] == "encryption-keys")
        assert volume["secret"]["secretName"] == "turngate-encryption-keys"
    encryption = _find(objects, "Secret", "turngate-encryption-keys")["stringData"]
    assert keys_file.name in encryption
    # The app's ledger URL is the least-privileged role; only the setup Job has the owner's.
    app_url = _find(objects, "Secret", "turngate-secrets")["stringData"]["TURNGATE_LEDGER_URL"]
    assert app_url.startswith("postgresql+psycopg://turngate_app:")
    setup = _find(objects, "Job", "turngate-setup")
    [container] = _pod_spec(setup)["containers"]
    assert container["args"] == ["setup", "--app-role", "turngate_app"]
    [owner] = container["env"]
    assert owner["valueFrom"]["secretKeyRef"] == {"name": "turngate-owner-db", "key": "TURNGATE_LEDGER_URL"}
    owner_url = _find(objects, "Secret", "turngate-owner-db")["stringData"]["TURNGATE_LEDGER_URL"]
    assert owner_url.startswith("postgresql+psycopg://turngate:")
    gc = _find(objects, "CronJob", "turngate-gc")
    assert gc["spec"]["schedule"]
    [gc_container] = _pod_spec(gc)["containers"]
    assert gc_container["args"][:2] == ["gc", "--older-than"]


def test_only_turngate_reaches_the_temporal_frontend(objects: list[dict[str, Any]]) -> None:
    policy = _find(objects, "NetworkPolicy", "temporal-frontend")
    assert policy["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "temporal"}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    frontend, internal = policy["spec"]["ingress"]
    assert frontend["ports"] == [{"protocol": "TCP", "port": 7233}]
    allowed = [peer["podSelector"]["matchLabels"] for peer in frontend["from"]]
    assert allowed == [
        {"app.kubernetes.io/name": "turngate", "app.kubernetes.io/component": "worker"},
        {"app.kubernetes.io/name": "turngate", "app.kubernetes.io/component": "api"},
        {"app.kubernetes.io/name": "temporal-ui"},
        {"app.kubernetes.io/name": "temporal-namespace"},
    ]
    assert internal == {"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "temporal"}}}]}
    # every selector matches a pod template (a typo would silently shut turngate out)
    pod_labels = [_pod_spec_labels(o) for o in objects if o["kind"] in WORKLOADS]
    for selector in allowed:
        assert any(selector.items() <= labels.items() for labels in pod_labels), selector
    ui = _find(objects, "Deployment", "temporal-ui")
    [ui_container] = _pod_spec(ui)["containers"]
    ui_env = {v["name"]: v.get("value") for v in ui_container["env"]}
    assert ui_env["TEMPORAL_CODEC_ENDPOINT"].endswith("/codec")


def _pod_spec_labels(workload: dict[str, Any]) -> dict[str, str]:
    spec = workload["spec"]["jobTemplate"]["spec"] if workload["kind"] == "CronJob" else workload["spec"]
    return spec["template"]["metadata"]["labels"]


def test_configuration_comes_from_the_configmap_and_the_secret(objects: list[dict[str, Any]]) -> None:
    config = _find(objects, "ConfigMap", "turngate-config")["data"]
    secret = _find(objects, "Secret", "turngate-secrets")["stringData"]
    assert config["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert config["TEMPORAL_NAMESPACE"]
    assert config["TURNGATE_ARTIFACTS"].startswith("s3://")
    assert config["AWS_ENDPOINT_URL"] == "http://minio:9000"
    assert config["TURNGATE_TOKEN_BUS_URL"].startswith("redis://")
    assert "TURNGATE_POLICY_MODULE" in config
    assert secret["TURNGATE_LEDGER_URL"].startswith("postgresql+psycopg://")
    assert {
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
    } <= secret.keys()
    assert not config.keys() & secret.keys()
    for name in ("turngate-worker", "turngate-api"):
        [container] = _pod_spec(_find(objects, "Deployment", name))["containers"]
        sources = container["envFrom"]
        assert {"configMapRef": {"name": "turngate-config"}} in sources
        assert {"secretRef": {"name": "turngate-secrets"}} in sources


def test_example_secrets_hold_placeholders_only(objects: list[dict[str, Any]]) -> None:
    secrets = [o for o in objects if o["kind"] == "Secret"]
    assert len(secrets) >= 5
    for secret in secrets:
        assert "data" not in secret, "use stringData placeholders, never encoded values"
        for key, value in secret["stringData"].items():
            if key == "TURNGATE_LEDGER_URL":
                password = value.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
                assert password == "REPLACE_ME", value
            else:
                assert value in PLACEHOLDER_VALUES, (secret["metadata"]["name"], key)


def test_every_reference_resolves(objects: list[dict[str, Any]]) -> None:
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    for workload in (o for o in objects if o["kind"] in WORKLOADS):
        spec = _pod_spec(workload)
        for container in _containers(workload):
            for source in container.get("envFrom", []):
                ref = source.get("configMapRef") or source.get("secretRef")
                kind = "ConfigMap" if "configMapRef" in source else "Secret"
                assert (kind, ref["name"]) in names, (workload["metadata"]["name"], ref)
            for variable in container.get("env", []):
                ref = variable.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    secret = _find(objects, "Secret", ref["name"])
                    assert ref["key"] in secret["stringData"], ref
            mounted = {mount["name"] for mount in container.get("volumeMounts", [])}
            declared = {volume["name"] for volume in spec.get("volumes", [])}
            claims = {c["metadata"]["name"] for c in workload["spec"].get("volumeClaimTemplates", [])}
            assert mounted <= declared | claims, (workload["metadata"]["name"], mounted)
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                assert ("ConfigMap", volume["configMap"]["name"]) in names


def test_selectors_match_pod_labels(objects: list[dict[str, Any]]) -> None:
    pod_labels = []
    for workload in (o for o in objects if o["kind"] in {"Deployment", "StatefulSet"}):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
        pod_labels.append(labels)
    for selecting in (o for o in objects if o["kind"] in {"Service", "PodDisruptionBudget"}):
        selector = selecting["spec"]["selector"]
        selector = selector.get("matchLabels", selector)
        assert any(selector.items() <= labels.items() for labels in pod_labels), selecting["metadata"]["name"]


def test_every_container_has_requests_and_limits(objects: list[dict[str, Any]]) -> None:
    for workload in (o for o in objects if o["kind"] in WORKLOADS):
        for container in _containers(workload):
            resources = container.get("resources", {})
            assert {"cpu", "memory"} <= resources.get("requests", {}).keys(), container["name"]
            assert {"cpu", "memory"} <= resources.get("limits", {}).keys(), container["name"]


def test_turngate_pods_run_as_the_image_user_without_privileges(objects: list[dict[str, Any]]) -> None:
    dockerfile = (DEPLOY.parent / "Dockerfile").read_text()
    assert "USER 10001:10001" in dockerfile
    for name in ("turngate-worker", "turngate-api"):
        spec = _pod_spec(_find(objects, "Deployment", name))
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 10001
        assert spec["automountServiceAccountToken"] is False
        [container] = spec["containers"]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        # A read-only root needs writable /tmp and data directory.
        assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/tmp", "/var/lib/turngate"}


@pytest.mark.parametrize(
    ("configmap", "key", "source"),
    [
        ("postgres-initdb", "10-roles.sh", "postgres/initdb.d/10-roles.sh"),
        ("temporal-scripts", "setup-postgres.sh", "temporal/setup-postgres.sh"),
        ("temporal-scripts", "create-namespace.sh", "temporal/create-namespace.sh"),
        ("temporal-dynamicconfig", "turngate.yaml", "temporal/dynamicconfig/turngate.yaml"),
    ],
)
def test_configmaps_carry_the_same_files_as_compose(
    objects: list[dict[str, Any]], configmap: str, key: str, source: str
) -> None:
    assert _find(objects, "ConfigMap", configmap)["data"][key] == (DEPLOY / source).read_text()


def test_images_match_the_compose_defaults(objects: list[dict[str, Any]], compose: dict[str, Any]) -> None:
    def default_tag(image: str) -> str:  # "temporalio/server:${TEMPORAL_VERSION:-1.31.0}" -> "...:1.31.0"
        name, _, tag = image.partition(":")
        return f"{name}:{tag.split(':-', 1)[1].rstrip('}')}" if ":-" in tag else image

    compose_images = {default_tag(s["image"]) for s in compose["services"].values() if "image" in s}
    k8s_images = {
        c["image"]
        for o in objects
        if o["kind"] in WORKLOADS
        for c in _containers(o)
        if c["image"] != "turngate"
    }
    assert k8s_images <= compose_images, k8s_images - compose_images


def test_kubectl_kustomize_renders_the_stack() -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed: kustomize rendering not checked (the YAML checks above ran)")
    result = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr
    rendered = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    for obj in rendered:
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "turngate", obj["metadata"]["name"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "turngate"
    images = {
        c["image"]
        for o in rendered
        if o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert "turngate:0.1.0" in images
    assert "turngate" not in images
