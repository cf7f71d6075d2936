"""Sample Factory 2.1 (APPO) on ALE Pong with the preprocessing of drl's Atari benchmarks: the peer side of
``bench.atari_throughput``. Runs inside the Sample Factory environment (``bench/peers/setup_atari_peers.sh``),
never in drl's, and imports nothing of drl.

Sample Factory 2.1 pins gymnasium 0.29, under which ale-py 0.12 registers no ``ALE/...`` ids, so the env is built
from ``ale_py.env.AtariEnv`` with the settings ``ALE/Pong-v5`` has (frameskip 1 at the emulator, sticky actions
0.25, the minimal action set, 108,000 frames per episode at most) and gymnasium's own ``AtariPreprocessing``
(up to 30 no-ops at reset, 4 frames per step with the max over the last two, 84x84 grayscale, no life-loss
terminal) and a stack of 4: the same observation the raw loop and drl's workers act on, (4, 84, 84) uint8.

The configuration is Sample Factory's own Atari defaults (``sf_examples.atari.atari_params``: the Nature CNN
encoder ``convnet_atari``, no RNN, batch 256, rollout 128, 4 epochs of 4 minibatches) with asynchronous
sampling (``--async_rl True``: APPO) and the device set to the CPU; every other flag given after ``--`` on
the command line overrides them. Its learner trains on what the workers collect, and the "Total num frames"
it reports counts the frames of the samples the learner has trained on (agent steps x ``env_frameskip`` 4).

    python bench/peers/sf_pong.py --num_workers 2 --num_envs_per_worker 4 --train_dir /tmp/sf
"""

from __future__ import annotations

import sys

GAME = "pong"
ENV_NAME = "pong_v5"


def make_pong(full_env_name, cfg=None, env_config=None, render_mode=None):
    import gymnasium as gym
    from ale_py.env import AtariEnv
    from sample_factory.envs.env_wrappers import NumpyObsWrapper

    env = AtariEnv(
        game=GAME,
        frameskip=1,
        repeat_action_probability=0.25,
        full_action_space=False,
        max_num_frames_per_episode=108_000,
        render_mode=render_mode,
    )
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True, terminal_on_life_loss=False
    )
    env = gym.wrappers.FrameStack(env, 4)
    return NumpyObsWrapper(env)


def main(argv: list[str]) -> int:
    from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
    from sample_factory.envs.env_utils import register_env
    from sample_factory.train import run_rl
    from sf_examples.atari.atari_params import atari_override_defaults

    sampler = argv[:1] == ["--sampler"]
    argv = argv[1:] if sampler else argv
    register_env(ENV_NAME, make_pong)
    argv = [
        "--env",
        ENV_NAME,
        "--device",
        "cpu",
        "--async_rl",
        "True",
        "--experiment",
        "pong_bench",
        "--restart_behavior",
        "overwrite",
        "--train_for_env_steps",
        str(10**12),
        "--save_every_sec",
        str(10**6),
        "--save_best_every_sec",
        str(10**6),
        "--with_wandb",
        "False",
        *argv,
    ]
    parser, partial = parse_sf_args(argv=argv)
    atari_override_defaults(partial.env, parser)
    cfg = parse_full_cfg(parser, argv)
    return sample(cfg) if sampler else run_rl(cfg)


def sample(cfg) -> int:
    import time

    from sample_factory.algo.sampling.simplified_sampling_api import SyncSamplingAPI
    from sample_factory.algo.utils.env_info import obtain_env_info_in_a_separate_process
    from sample_factory.algo.utils.rl_utils import samples_per_trajectory

    api = SyncSamplingAPI(cfg, obtain_env_info_in_a_separate_process(cfg))
    api.start()
    sampled, last = 0, 0.0
    try:
        while True:
            trajectory = api.get_trajectories_sync()
            if trajectory is None:
                break
            sampled += samples_per_trajectory(trajectory)
            if time.monotonic() - last >= 1.0:
                last = time.monotonic()
                print(f"sampled {sampled}", flush=True)
    except KeyboardInterrupt:
        pass
    api.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
