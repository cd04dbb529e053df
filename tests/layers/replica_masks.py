"""Writes the dropout masks of every replica of this process (logical CPU devices must be set
before TensorFlow starts, hence a process of its own).

    python -m tests.layers.replica_masks OUT.npz [--devices K]

Under TF_CONFIG: MultiWorkerMirroredStrategy over this worker's one CPU; else MirroredStrategy
over K logical CPUs. Each replica applies one `Dropout(0.5, seed=1)` to the same ones twice (two
steps); OUT.npz holds `masks` [steps, local replicas, 64, 64] and the replicas' global ids.
"""

import argparse
import os


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--devices", type=int, default=1)
    args = parser.parse_args()

    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * args.devices)

    import keras
    import numpy as np

    from vtx.layers.dropout import Dropout
    from vtx.training.distribute import make_strategy

    devices = None if os.environ.get("TF_CONFIG") else [f"/cpu:{i}" for i in range(args.devices)]
    strategy = make_strategy(devices)
    keras.utils.set_random_seed(1)  # as the trainer: the same on every worker
    with strategy.scope():
        layer = Dropout(0.5, seed=1)
    inputs = tf.ones([64, 64])

    @tf.function
    def step():
        def replica():
            context = tf.distribute.get_replica_context()
            return layer(inputs, training=True) != 0, context.replica_id_in_sync_group

        return strategy.run(replica)

    masks, ids = [], None
    for _ in range(2):
        mask, ids = step()
        masks.append([m.numpy() for m in strategy.experimental_local_results(mask)])
    np.savez(args.out, masks=np.array(masks),
             ids=np.array([i.numpy() for i in strategy.experimental_local_results(ids)]))


if __name__ == "__main__":
    main()
