from vtx.training.stream import BatchStream


def labelled_epochs(epoch, skip):
    """Three batches per epoch, each naming (epoch, index)."""
    return [(epoch, index) for index in range(3)][skip:]


def test_stream_crosses_epochs_and_counts_its_position():
    stream = BatchStream(labelled_epochs)
    assert [stream.next() for _ in range(7)] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2),
                                                 (2, 0)]
    assert stream.position == (2, 1)


def test_stream_resumed_at_a_position_continues_the_same_sequence():
    resumed = BatchStream(labelled_epochs, epoch=1, offset=2)
    assert [resumed.next() for _ in range(3)] == [(1, 2), (2, 0), (2, 1)]
    assert resumed.position == (2, 2)
