"""Runs a small training job in its own process (logical CPU devices must be set before TF starts).

    python -m tests.training.driver SAVE_DIR --max-steps N [--devices K] [--update-freq U]
        [--dropout P] [--layers L] [--save-every S] [--step-sleep SECONDS] [--sigterm-at STEP]
        [--pack]
        [--prefetch K] [--show-placement] [--jit] [--ema-decay D [--ema-start-step N]]
        [--precision P [--cpu-flags "F ..."] [--bf16-speedup X]] [--scores "S1,S2,..."]

Prints `loss-step-1: X` and writes SAVE_DIR/final_weights_<worker>.npz.
"""

import argparse
import os
import signal
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("save_dir")
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--update-freq", type=int, default=1)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--layers", type=int, default=2,
                        help="encoder and decoder layers of the tiny model")
    parser.add_argument("--max-minutes", type=float, default=0.0)
    parser.add_argument("--cooldown", type=float, default=0.0)
    parser.add_argument("--save-every", type=int, default=0)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--sigterm-at", type=int,
                        help="send this process SIGTERM while it waits for this step's update")
    parser.add_argument("--pack", action="store_true",
                        help="packed batches: 4 rows of 3 pairs each, one shape")
    parser.add_argument("--prefetch", type=int, default=2,
                        help="batches read and placed on the devices ahead (Trainer's)")
    parser.add_argument("--show-placement", action="store_true",
                        help="print the devices of the first update's batches")
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--jit", action="store_true", help="XLA (--jit of vtx train)")
    parser.add_argument("--ema-decay", type=float,
                        help="keep the weights' EMA; SAVE_DIR/final_ema_<worker>.npz then holds "
                             "every replica's copy of it")
    parser.add_argument("--ema-start-step", type=int, default=0)
    parser.add_argument("--cpu-flags", help="this CPU's flags as `auto` reads them (mocked)")
    parser.add_argument("--bf16-speedup", type=float,
                        help="what `auto`'s timing of bfloat16 against float32 returns (stubbed)")
    parser.add_argument("--scores", help="validate after every update, the checkpoint kept by "
                                         "a BLEU that returns these values in turn (scripted)")
    args = parser.parse_args()

    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * max(args.devices, 1))

    import numpy as np

    from tests.training.synthetic import epoch_maker, make_pairs
    from vtx import config
    from vtx.training import precision
    from vtx.training.distribute import make_strategy
    from vtx.training.trainer import Trainer

    model_config = config.preset("tiny", vocab_size=24, dropout=args.dropout,
                                 num_layers=args.layers)
    # Adam divides by sqrt(v) + epsilon: at the paper's 1e-9, a parameter whose true gradient is 0
    # (an attention key bias, which the softmax ignores) moves a whole learning-rate step on
    # float32 round-off, and round-off differs with the summation order of 1 vs 8 replicas.
    # 1e-5 keeps the comparisons about the gradients.
    if args.cpu_flags is not None:
        precision.cpu_flags = lambda: set(args.cpu_flags.split())
    if args.bf16_speedup is not None:
        precision.matmul_speedup = lambda rows, inner, outer: (
            args.bf16_speedup, 0.004, 0.004 / args.bf16_speedup)
    train_config = config.TrainConfig(max_steps=args.max_steps, precision=args.precision,
                                      max_minutes=args.max_minutes, cooldown=args.cooldown,
                                      update_freq=args.update_freq, jit_compile=args.jit,
                                      adam_epsilon=1e-5, warmup_steps=10, lr_scale=0.5, log_interval_steps=1,
                                      validate_interval_steps=1 if args.scores else 0,
                                      best_checkpoint_metric="bleu" if args.scores else "loss",
                                      save_interval_minutes=0, save_interval_steps=args.save_every,
                                      ema_decay=args.ema_decay, ema_start_step=args.ema_start_step)
    # A worker of a TF_CONFIG cluster, or of a Slurm step of several tasks, takes every device
    # it sees (--devices is refused there).
    several = os.environ.get("TF_CONFIG") or int(os.environ.get("SLURM_STEP_NUM_TASKS", "1")) > 1
    devices = None if several else [f"/cpu:{i}" for i in range(args.devices)]
    trainer = Trainer(model_config, train_config, args.save_dir, strategy=make_strategy(devices),
                      prefetch=args.prefetch)
    if args.show_placement:
        per_replica = trainer.engine.collectives.per_replica

        def shown(batches):
            if not shown.done:
                shown.done = True
                print("batch devices: " + " ".join(
                    f"{b['source'].device} {b['source'].dtype.name}"
                    if isinstance(b["source"], tf.Tensor) else "host" for b in batches),
                    flush=True)
            return per_replica(batches)

        shown.done = False
        trainer.engine.collectives.per_replica = shown
    # Two batch shapes in turn: the replicas of one update hold batches of different shapes, as
    # in `vtx train`, and every update the same ones (8 batches each; 24 in an epoch), so that
    # the update is traced once: with 8 replicas each new set of shapes costs ~55 s on 2 cores.
    make_epoch = epoch_maker(make_pairs(96, 24, seed=3), batch_size=4, seed=5,
                             lengths=[(8, 9), (10, 12)])
    if args.pack:
        make_epoch = packed_epoch_maker(make_pairs(96, 24, seed=3), seed=5)
    first = []

    def slow_epoch(epoch, skip):
        for batch in make_epoch(epoch, skip):
            time.sleep(args.step_sleep)
            yield batch

    original = trainer.engine.read_update

    def recorded_update(totals):
        if trainer.state.step + 1 == args.sigterm_at:
            os.kill(os.getpid(), signal.SIGTERM)  # to fit's handler, as a scheduler sends it
        totals = original(totals)
        if not first:
            first.append(totals[0] / totals[2])
            print(f"loss-step-{trainer.state.step + 1}: {first[0]:.8f}", flush=True)
        return totals

    trainer.engine.read_update = recorded_update
    make_valid = score_valid = None
    if args.scores:
        from vtx.training.validation import Score

        valid = epoch_maker(make_pairs(8, 24, seed=9), batch_size=4)(0, 0)
        scores = iter(float(value) for value in args.scores.split(","))
        make_valid = lambda: valid  # noqa: E731
        score_valid = lambda should_stop: Score("bleu", next(scores), "scripted")  # noqa: E731
    trainer.fit(slow_epoch, make_valid, score_valid)
    if args.scores:
        state = trainer.state
        print(f"best_score {state.best_score} since_best "
              f"{state.validations_since_best}", flush=True)
    weights = {f"w{i:04d}": np.asarray(v.numpy()) for i, v in enumerate(trainer.model.variables)}
    out = Path(args.save_dir) / f"final_weights_{trainer.engine.topology.worker_index}.npz"
    np.savez(out, **weights)
    if trainer.engine.ema is not None:
        local = trainer.engine.strategy.experimental_local_results
        copies = {f"r{replica}_{index:04d}": np.asarray(copy.numpy())
                  for index, average in enumerate(trainer.engine.ema.variables)
                  for replica, copy in enumerate(local(average))}
        np.savez(Path(args.save_dir) / f"final_ema_{trainer.engine.topology.worker_index}.npz",
                 **copies)
    print(f"finished at step {trainer.state.step}", flush=True)


def packed_epoch_maker(pairs, seed: int):
    """`(epoch, skip) -> batches` of 4 rows of 3 pairs each (`vtx.data.packing.pack_batch`,
    one shape), shuffled by (seed, epoch)."""
    import numpy as np

    from vtx.data.packing import pack_batch

    def make_epoch(epoch: int, skip: int):
        order = np.random.default_rng([seed, epoch]).permutation(len(pairs))
        rows = [[pairs[j] for j in order[i:i + 3]] for i in range(0, len(order), 3)]
        return [pack_batch(rows[i:i + 4], (4, 24, 27)) for i in range(0, len(rows), 4)][skip:]

    return make_epoch


if __name__ == "__main__":
    main()
