"""`vtx.inference.decoding`: the search's memory estimate."""

from vtx.config import preset
from vtx.inference.decoding import DecodeOptions, search_bytes


def test_a_wide_beams_estimate_holds_every_vocabulary_sized_array_of_a_step():
    """`--beam 100000` on a 4,000-piece tiny model took 11.3 GB and was not refused on a machine
    of 23 GiB: the estimate counted 3 vocabulary-sized arrays a hypothesis, but a beam whose
    2K + 2 candidates a row reach the vocabulary holds 7 or more (logits, the log-sum-exp, the
    candidates' values, ids, log-probabilities and mask) beside its self-attention cache."""
    config = preset("tiny", vocab_size=4000)
    source_length = 15
    for beam in (2000, 100000):
        options = DecodeOptions(beam=beam)
        length = options.length_limit(source_length, config.max_positions)
        cache = 4 * 2 * config.num_layers * config.d_model * length
        encoder = 4 * 2 * config.num_layers * config.d_model * source_length
        per_hypothesis = (search_bytes(options, config, source_length) - encoder) / beam
        assert per_hypothesis >= cache + 7 * 4 * config.vocab_size
    # Refused by `vtx translate` where half of the memory available is below it.
    assert search_bytes(DecodeOptions(beam=100000), config, source_length) > 11.5 * 2**30


def test_a_narrow_beams_estimate_counts_its_candidates_not_the_vocabulary():
    """A beam of 4 takes 10 candidates a row, not V: its estimate is not inflated by the wide
    beam's arrays, which would split batches for nothing."""
    config = preset("tiny", vocab_size=32000)
    options = DecodeOptions(beam=4)
    length = options.length_limit(20, config.max_positions)
    cache = 4 * 2 * config.num_layers * config.d_model * length
    per_hypothesis = search_bytes(options, config, 20) / 4
    assert per_hypothesis < cache + 5 * 4 * config.vocab_size
