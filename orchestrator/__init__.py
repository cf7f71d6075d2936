"""drl-orchestrate: turns an experiment configuration into workloads and runs them."""
