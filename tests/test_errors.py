"""`vtx.errors.ArgumentError`: one message, worded for the library or for a command's flags."""

from vtx.errors import ArgumentError


def test_the_message_names_the_arguments_or_the_flags_a_command_maps_them_to():
    error = ArgumentError("{beam} {size}: needs {need:.1f} GiB; use a smaller {beam} or {force}",
                          size=1000, need=2.34)
    assert isinstance(error, ValueError)
    assert error.arguments == ["beam", "force"]
    assert str(error) == "beam 1000: needs 2.3 GiB; use a smaller beam or force"
    flags = {"beam": "--beam", "force": "--force"}
    assert error.message(flags.get) == "--beam 1000: needs 2.3 GiB; use a smaller --beam or --force"


def test_values_are_written_as_they_are_even_with_braces():
    error = ArgumentError("{output} {path} already exists", path="/tmp/{name}.txt")
    assert (error.message(lambda argument: "--" + argument)
            == "--output /tmp/{name}.txt already exists")


def test_tensorflow_errors_are_said_in_its_own_words_and_out_of_memory_is_told_apart():
    """A tf.function's error carries a "Graph execution error" header, the node's Python stack
    and graph tags before TensorFlow's words: only the words are kept. ResourceExhaustedError is
    the device's memory unless it is a full disk; CUDA's allocator can fail as another kind."""
    import tensorflow as tf

    from vtx.errors import disk_full, out_of_device_memory, tf_message

    @tf.function
    def gather_tenth(x):
        return tf.gather(x * 2.0, [10])

    with tf.device("/CPU:0"):
        try:
            gather_tenth(tf.ones(3)).numpy()
        except tf.errors.InvalidArgumentError as error:
            raised = error
    assert raised.message.startswith("Graph execution error:")  # what TensorFlow says first
    assert tf_message(raised) == "indices[0] = 10 is not in [0, 3)"
    peer = tf.errors.UnavailableError(None, None, (
        "{{function_node __wrapped__CollectiveReduceV2_Nordering_token_1_device_/job:worker/"
        "replica:0/task:0/device:CPU:0}} Collective ops is aborted by: Error reported from "
        "/job:worker/task:1: The following tasks are unhealthy (stopped sending heartbeats):\n"
        "/job:worker/replica:0/task:1\nThe tasks have crashed."))
    assert tf_message(peer) == ("Collective ops is aborted by: Error reported from /job:worker/"
                                "task:1: The following tasks are unhealthy (stopped sending "
                                "heartbeats): /job:worker/replica:0/task:1")

    def error(kind, message):
        return getattr(tf.errors, kind)(None, None, message)

    assert out_of_device_memory(error("ResourceExhaustedError", "OOM when allocating tensor"))
    full = error("ResourceExhaustedError", "/cache/x.pb; No space left on device")
    assert disk_full(full) and not out_of_device_memory(full)
    assert out_of_device_memory(error("InternalError", "CUDA_ERROR_OUT_OF_MEMORY: out of memory"))
    assert not out_of_device_memory(error("InternalError", "libdevice not found"))
    assert not out_of_device_memory(MemoryError("out of memory"))  # the host's, not a device's
