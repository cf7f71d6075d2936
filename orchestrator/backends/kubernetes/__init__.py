"""The Kubernetes backend: a run's workloads as Jobs in a cluster. The only code of drl that talks Kubernetes.

``manifests``: the run's objects, built from the same plan as local processes (pure: no cluster, no client);
``api``: ``KubeApi``, the wrapper around the official ``kubernetes`` client (the only module that imports it);
``run``: creating a run and watching it to the end, and deleting it; ``scale``: live scaling through the rollout
Indexed Job and in-cluster scaler Jobs; ``status``: one row per pod, from each pod's ``/metrics``.
"""
