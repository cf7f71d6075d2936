"""Process shells around the drl library: rollout workers, the trainer and the evaluator."""
