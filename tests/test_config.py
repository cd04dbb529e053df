import dataclasses

import pytest

from vtx import config


def test_presets_have_the_papers_settings():
    assert (config.BASE.num_layers, config.BASE.d_model, config.BASE.d_ff, config.BASE.num_heads,
            config.BASE.dropout) == (6, 512, 2048, 8, 0.1)
    assert (config.BIG.num_layers, config.BIG.d_model, config.BIG.d_ff, config.BIG.num_heads,
            config.BIG.dropout) == (6, 1024, 4096, 16, 0.3)
    assert (config.PARSE_BIG.num_layers, config.PARSE_BIG.d_model, config.PARSE_BIG.d_ff,
            config.PARSE_BIG.num_heads) == (4, 1024, 4096, 16)
    assert config.BASE.head_dim == config.BIG.head_dim == 64
    assert config.BASE.attention_dropout == config.BASE.relu_dropout == 0.0


def test_invalid_shapes_are_refused_with_the_values():
    with pytest.raises(ValueError, match="d_model \\(100\\).*num_heads \\(8\\)"):
        dataclasses.replace(config.BASE, d_model=100)
    with pytest.raises(ValueError, match="dropout"):
        dataclasses.replace(config.BASE, dropout=1.5)


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(KeyError, match="base, big, parse-big, tiny"):
        config.preset("huge")


def test_json_round_trip(tmp_path):
    cfg = config.preset("big", vocab_size=32000, dropout=0.1)
    cfg.save(tmp_path / "model.json")
    assert config.ModelConfig.load(tmp_path / "model.json") == cfg
    # No temporary left: atomic.hidden_name's (`.model.json.tmp-HOST-PID-TOKEN.json`), which
    # "model.json.tmp" never named, so that the check could not fail.
    assert [path.name for path in tmp_path.iterdir()] == ["model.json"]


def test_unknown_keys_are_refused():
    with pytest.raises(ValueError, match="unknown model configuration keys: colour"):
        config.ModelConfig.from_dict({"colour": "red"})


@pytest.mark.parametrize("options,message", [
    ({"subword_alpha": 0.0}, "subword_alpha must be positive, got 0.0"),
    ({"subword_alpha": float("inf")}, "subword_alpha must be positive, got inf"),
    ({"subword_nbest": 4}, "subword_nbest needs subword sampling"),
    ({"subword_alpha": 0.1, "subword_nbest": 1}, "subword_nbest must be >= 2, got 1")])
def test_subword_sampling_settings_are_checked(options, message):
    with pytest.raises(ValueError, match=message):
        config.TrainConfig(**options)
    kept = config.TrainConfig(subword_alpha=0.5, subword_nbest=8)
    assert config.TrainConfig.from_dict(kept.to_dict()) == kept


def test_added_fields_at_their_defaults_are_left_out_of_the_dict():
    # A configuration written before the fields existed reads as the same one, and a new one
    # of the paper's model writes what the old vtx wrote (resume compares the dicts).
    old = {key: value for key, value in config.BASE.to_dict().items()}
    assert not set(config.ADDED_FIELDS) & set(old)
    assert config.ModelConfig.from_dict(old) == config.BASE
    marian = dataclasses.replace(config.BASE, activation="swish", final_logits_bias=True,
                                 position_layout="sines_then_cosines")
    written = marian.to_dict()
    assert (written["activation"], written["final_logits_bias"]) == ("swish", True)
    assert "scale_embedding" not in written
    assert config.ModelConfig.from_dict(written) == marian
    assert marian.parameter_count == config.BASE.parameter_count + config.BASE.vocab_size


@pytest.mark.parametrize("options,message", [
    ({"activation": "tanh"}, "activation must be one of relu, swish, gelu, got 'tanh'"),
    ({"position_layout": "learned"}, "position_layout must be one of interleaved, "
                                     "sines_then_cosines, got 'learned'"),
    ({"scale_embedding": 1}, "scale_embedding must be true or false, got 1"),
    ({"final_logits_bias": "yes"}, "final_logits_bias must be true or false, got 'yes'")])
def test_added_fields_are_checked(options, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(config.BASE, **options)
