"""examples/kubernetes/ stays deployable: valid Kubernetes objects, and a RayJob set up the way elastic needs.

Core objects are validated offline against the Kubernetes OpenAPI schemas that kubernetes-validate
ships; the RayJob custom resource (no schema there) is checked for what the elastic setup relies on:
token authentication on every Ray node, no reachable dashboard, GPU limits on the workers, and
an entrypoint that `elastic run` itself accepts.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml  # type: ignore[import-untyped]

from elastic.cli.grammar import build_parsers

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kubernetes"
KUBERNETES_VERSION = "1.30.0"


def _documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(EXAMPLE.glob("*.y*ml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document is not None:
                found.append((path.name, document))
    return found


DOCUMENTS = _documents()
CORE = [(name, doc) for name, doc in DOCUMENTS if "." not in doc["apiVersion"].split("/")[0]]
RAYJOBS = [doc for _, doc in DOCUMENTS if doc["kind"] == "RayJob"]


def _groups(rayjob: dict[str, Any]) -> list[dict[str, Any]]:
    cluster = rayjob["spec"]["rayClusterSpec"]
    return [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]


def _ray_container(group: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = group["template"]["spec"]["containers"][0]
    return container


def test_the_example_has_a_rayjob_and_the_volume_it_mounts() -> None:
    kinds = sorted(doc["kind"] for _, doc in DOCUMENTS)
    assert kinds == ["PersistentVolumeClaim", "RayJob"]


@pytest.mark.parametrize(("name", "document"), CORE, ids=[f"{n}:{d['kind']}" for n, d in CORE])
def test_core_objects_are_valid_kubernetes(name: str, document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_every_ray_pod_template_is_a_valid_pod() -> None:
    """Head and worker templates, validated as the Pods KubeRay makes of them (strict: no typos)."""
    for rayjob in RAYJOBS:
        for group in _groups(rayjob):
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": group["template"]["spec"]}
            kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


def test_token_authentication_is_on_for_head_workers_and_submitter() -> None:
    """KubeRay's authOptions put the token from its Secret in every container; nothing turns it off."""
    for rayjob in RAYJOBS:
        assert rayjob["spec"]["rayClusterSpec"]["authOptions"] == {"mode": "token"}
        for group in _groups(rayjob):
            for container in group["template"]["spec"]["containers"]:
                env = {item["name"]: item for item in container.get("env", [])}
                assert "RAY_AUTH_MODE" not in env and "RAY_AUTH_TOKEN" not in env


def test_the_dashboard_is_not_exposed() -> None:
    """Bound to loopback (the sidecar submitter reaches it there), and nothing publishes it."""
    for rayjob in RAYJOBS:
        cluster = rayjob["spec"]["rayClusterSpec"]
        head = cluster["headGroupSpec"]
        assert head["rayStartParams"].get("dashboard-host") == "127.0.0.1" or (
            head["rayStartParams"].get("include-dashboard") == "false"
        )
        assert rayjob["spec"]["submissionMode"] == "SidecarMode"
        assert head.get("serviceType", "ClusterIP") == "ClusterIP"
        assert "headService" not in head
        assert not cluster.get("enableIngress", False)
    assert not [doc for _, doc in DOCUMENTS if doc["kind"] in ("Service", "Ingress")]


def test_workers_have_gpu_limits_and_run_on_spot_nodes() -> None:
    for rayjob in RAYJOBS:
        for group in rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
            spec = group["template"]["spec"]
            assert int(_ray_container(group)["resources"]["limits"]["nvidia.com/gpu"]) >= 1
            assert spec["nodeSelector"] and spec["tolerations"]
            assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])


def test_the_job_cleans_up_and_retries_a_bounded_number_of_times() -> None:
    for rayjob in RAYJOBS:
        spec = rayjob["spec"]
        assert spec["shutdownAfterJobFinishes"] is True
        assert 0 < spec["ttlSecondsAfterFinished"] <= 3600
        assert 0 < spec["backoffLimit"] <= 5


def test_every_pod_mounts_the_checkpoint_claim() -> None:
    claims = {doc["metadata"]["name"] for _, doc in DOCUMENTS if doc["kind"] == "PersistentVolumeClaim"}
    for rayjob in RAYJOBS:
        for group in _groups(rayjob):
            volumes = {v["name"]: v for v in group["template"]["spec"]["volumes"]}
            mounts = {m["mountPath"]: m["name"] for m in _ray_container(group)["volumeMounts"]}
            assert volumes[mounts["/ckpt"]]["persistentVolumeClaim"]["claimName"] in claims


def test_the_entrypoint_is_an_elastic_run_that_elastic_accepts() -> None:
    """Parsed by elastic's own parser: the flags exist and their values are allowed."""
    for rayjob in RAYJOBS:
        argv = shlex.split(rayjob["spec"]["entrypoint"])
        assert argv[:4] == ["python", "-m", "elastic", "run"]
        options, command = argv[3 : argv.index("--")], argv[argv.index("--") + 1 :]
        parser, _ = build_parsers()
        args = parser.parse_args(options)
        assert args.backend == "ray"
        assert args.nnodes[0] < args.nnodes[1]
        assert str(args.checkpoint_dir).startswith("/ckpt") and str(args.run_dir).startswith("/ckpt")
        assert args.run_id, "a fixed --run-id lets a retried RayJob continue the run"
        assert command[0] == "python"
        workers = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]
        assert all(args.node_resource in g["rayStartParams"]["resources"] for g in workers)


def test_the_image_installs_elastic_as_a_non_root_user() -> None:
    lines = [line.strip() for line in (EXAMPLE / "Dockerfile").read_text().splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    base = next(line for line in instructions if line.startswith("ARG BASE_IMAGE="))
    assert base.startswith("ARG BASE_IMAGE=rayproject/ray:")
    assert "FROM ${BASE_IMAGE}" in instructions
    assert any("pip install" in line and "/home/ray/elastic-src" in line for line in instructions)
    users = [line for line in instructions if line.startswith("USER ")]
    assert users and users[-1] not in ("USER root", "USER 0")
