"""The Kubernetes backend: a run's workloads as Jobs in a cluster. The only code of drl that talks Kubernetes.

``manifests``: the run's objects, built from the same plan as local processes (pure: no cluster, no client);
``api``: ``KubeApi``, the wrapper around the official ``kubernetes`` client (the only module that imports it,
and only when a ``KubeApi`` is made, so ``render`` and local runs never load the client); ``run``: creating a
run and watching it to the end, and deleting it; ``scale``: live scaling through the rollout Indexed Job and
in-cluster scaler Jobs; ``status``: one row per pod, from each pod's ``/metrics``.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from drl.config import ExperimentConfig
from drl.errors import UserError
from drl.naming import check_workers, default_kubernetes_run_name
from orchestrator.backends.base import (
    Deployment,
    check_tracking,
    note_a_large_policy_lag,
    warn_if_too_short_to_learn,
)
from orchestrator.backends.kubernetes import manifests
from orchestrator.backends.kubernetes.api import default_namespace


class KubernetesBackend:
    """``orchestrator.backends.base.Backend`` on the cluster of the kubeconfig (or the in-cluster service
    account); the namespace is ``--namespace``, else the kubeconfig's current one."""

    name = "kubernetes"

    def check(self, deployment: Deployment, resume: bool = False) -> None:
        if resume:
            raise UserError(
                "--resume applies to local runs; on Kubernetes a restarted trainer resumes from its "
                "checkpoint by itself"
            )
        if deployment.output:
            raise UserError("--output applies to local runs; a Kubernetes run is found by its name and --namespace")
        if deployment.namespace:
            manifests.check_namespace(deployment.namespace)
        for flag, image in (("--image", deployment.image), ("--s3-image", deployment.s3_image)):
            if any(c.isspace() for c in image):
                raise UserError(f"{flag} must name an image, got {image!r}")
        manifests.check_s3_storage(deployment.s3_storage, deployment.s3_storage_class)
        manifests.resources_for(deployment.profile, deployment.resources)
        if deployment.pending_timeout is not None and not deployment.pending_timeout >= 0:
            raise UserError(
                f"--pending-timeout must be 0 (wait for ever) or more seconds, got {deployment.pending_timeout:g}"
            )

    @staticmethod
    def namespace(deployment: Deployment) -> str:
        return deployment.namespace or manifests.check_namespace(default_namespace())

    def objects(self, cfg: ExperimentConfig, deployment: Deployment) -> tuple[ExperimentConfig, str, list[dict]]:
        """(configuration with its run name, namespace, manifests) of a run; reads no cluster."""
        if cfg.run_name:
            manifests.check_run_name(cfg.run_name)
        manifests.check_memory_url(cfg.memory)
        manifests.check_store_url(cfg.store)
        if cfg.store and (deployment.s3_storage or deployment.s3_storage_class):
            raise UserError(
                "--s3-storage and --s3-storage-class apply to the run's own S3 server; with --store "
                "the run uses your S3 store instead"
            )
        namespace = self.namespace(deployment)
        run = cfg.run_name or default_kubernetes_run_name(cfg.preset, cfg.env, cfg.mode)
        cfg = dataclasses.replace(cfg, run_name=run)
        objects = manifests.manifests(
            cfg,
            run,
            namespace=namespace,
            resources=manifests.resources_for(deployment.profile, deployment.resources),
            s3_storage_class=deployment.s3_storage_class,
            **self.images_and_storage(deployment),
        )
        return cfg, namespace, objects

    @staticmethod
    def images_and_storage(deployment: Deployment) -> dict:
        """The images, their pull policy and the S3 server's storage: the flags', else the profile's (``local``:
        ``manifests.LOCAL_IMAGES``, never pulled, no PVC, as the chart's helm/profiles/local.yaml), else the
        defaults."""
        if deployment.profile == manifests.LOCAL_PROFILE:
            local = manifests.LOCAL_IMAGES
            return {
                "image": deployment.image or local["drl"],
                "redis_image": local["redis"],
                "s3_image": deployment.s3_image or local["s3"],
                "pull_policy": "Never",
                "s3_storage": deployment.s3_storage or manifests.S3_EMPTYDIR,
            }
        return {
            "image": deployment.image or manifests.DEFAULT_IMAGE,
            "s3_image": deployment.s3_image or manifests.S3_IMAGE,
            "s3_storage": deployment.s3_storage or manifests.S3_STORAGE,
        }

    def run(self, cfg: ExperimentConfig, deployment: Deployment, resume: bool = False) -> int:
        from orchestrator.backends.kubernetes.run import run_kubernetes

        check_tracking(cfg, local=False)
        cfg, namespace, objects = self.objects(cfg, deployment)
        warn_if_too_short_to_learn(cfg)
        note_a_large_policy_lag(cfg)
        print(
            f"drl: run {cfg.run_name} ({cfg.algorithm} on {cfg.env}, {cfg.mode}, {cfg.workers} workers, "
            f"{cfg.steps:,} steps) -> Kubernetes namespace {namespace}",
            file=sys.stderr,
        )
        options: dict[str, Any] = (
            {} if deployment.pending_timeout is None else {"pending_timeout_s": deployment.pending_timeout}
        )
        return run_kubernetes(cfg.run_name, objects, namespace=namespace, detach=deployment.detach, **options)

    def render(self, cfg: ExperimentConfig, deployment: Deployment) -> str:
        return manifests.to_yaml(self.objects(cfg, deployment)[2])

    def status(self, run: str | None, deployment: Deployment) -> int:
        from orchestrator.backends.kubernetes.status import show_status

        if run is None:
            raise UserError(
                "status of a Kubernetes run needs the run's name: drl-orchestrate status RUN --namespace NS"
            )
        manifests.check_run_name(run, "RUN")
        return show_status(run, self.namespace(deployment))

    def stop(self, run: str, deployment: Deployment, timeout: float) -> int:
        raise UserError(
            f"a Kubernetes run cannot be stopped cleanly from outside the cluster yet; it ends with its "
            f"trainer, or remove it with drl-orchestrate delete {run} --namespace "
            f"{deployment.namespace or 'NS'}"
        )

    def scale(self, run: str, workers: int, deployment: Deployment, timeout: float) -> int:
        from orchestrator.backends.kubernetes.scale import scale_run

        check_workers(workers)
        if timeout < 0:
            raise UserError(f"--timeout must not be negative, got {timeout:g}")
        manifests.check_run_name(run, "RUN")
        return scale_run(run, self.namespace(deployment), workers, hand_in_s=timeout)

    def delete(self, run: str, deployment: Deployment) -> int:
        from orchestrator.backends.kubernetes.run import delete_run

        manifests.check_run_name(run, "RUN")
        return delete_run(run, self.namespace(deployment))
