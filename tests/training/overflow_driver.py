"""Updates on two replicas (logical CPU devices, set before TensorFlow starts: its own process)
whose second replica's gradients are made infinite, as float16's overflow makes them.

    python -m tests.training.overflow_driver SAVE_DIR PRECISION UPDATE_FREQ [jit]

Prints one JSON line about the first update (what was stepped, the loss scale before and after,
whether the weights and optimizer state are unchanged and finite, how many conditionals the
update's graph holds), then trains with the overflow on every update and prints the
TrainingError that stops it (`error: ...`). `jit`: under XLA (`vtx train --jit`).
"""

import json
import sys


def main() -> None:
    save_dir, precision, update_freq = sys.argv[1], sys.argv[2], int(sys.argv[3])
    jit = sys.argv[4:] == ["jit"]
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

    import numpy as np

    from tests.training.synthetic import epoch_maker, make_pairs, to_batch
    from vtx import config
    from vtx.training.distribute import make_strategy
    from vtx.errors import TrainingError
    from vtx.training.trainer import Trainer

    lines = []
    trainer = Trainer(config.preset("tiny", vocab_size=20, dropout=0.0),
                      config.TrainConfig(max_steps=100, precision=precision,
                                         update_freq=update_freq, jit_compile=jit,
                                         save_interval_minutes=0,
                                         validate_interval_steps=0, max_nonfinite_in_a_row=3),
                      save_dir, strategy=make_strategy(["/cpu:0", "/cpu:1"]), log=lines.append)
    gradients = trainer.engine._gradient_fn

    def second_replica_overflows(batch):
        sums, grads = gradients(batch)
        second = tf.distribute.get_replica_context().replica_id_in_sync_group == 1
        grads = [tf.convert_to_tensor(grad) for grad in grads]  # the embedding's: IndexedSlices
        return sums, [tf.where(second, tf.fill(tf.shape(g), tf.constant(np.inf, g.dtype)), g)
                      for g in grads]

    trainer.engine._gradient_fn = second_replica_overflows  # before the update is first traced

    class Repeat:
        batch = to_batch(make_pairs(4, 20, seed=1))

        def next(self):
            return self.batch

    def state():
        return [np.asarray(v.numpy()) for v in
                trainer.model.variables + trainer.engine.optimizer.variables
                if v.path not in ("dynamic_scale", "loss_scale_optimizer/dynamic_scale")]

    scale = getattr(trainer.engine.optimizer, "dynamic_scale", None)
    scale_before = float(scale.numpy()) if scale is not None else None
    before = state()
    totals = trainer.engine.train_update(Repeat())
    after = state()
    print(json.dumps({
        "stepped": float(totals[3]),
        "nonfinite_replicas": float(totals[5]) if len(totals) > 5 else None,
        "scale_before": scale_before, "scale_after": float(totals[4]),
        "iterations": int(trainer.engine.optimizer.iterations.numpy()),
        "unchanged": all(np.array_equal(a, b) for a, b in zip(before, after)),
        "finite": all(np.isfinite(a).all() for a in after if a.dtype.kind == "f"),
        "conditionals": conditionals(trainer.engine._update_program.graph.as_graph_def()),
    }), flush=True)
    if scale is not None:
        scale.assign(2.0 ** -10)  # fewer halvings to the floor
    try:
        trainer.fit(epoch_maker(make_pairs(16, 20), 4))
        print("finished at step", trainer.state.step)
    except TrainingError as error:
        print(f"error: {error}")
    print(f"logged: {lines[-1]}")


def conditionals(graph) -> int:
    """The `If` operations of a GraphDef and of the functions it calls (each a branch the host
    decides: TensorFlow keeps their predicate in the host's memory)."""
    nodes = list(graph.node) + [node for function in graph.library.function
                                for node in function.node_def]
    return sum(node.op in ("If", "StatelessIf") for node in nodes)


if __name__ == "__main__":
    main()
