"""Decoding's precision choice (`vtx.precision`): `auto` as training chooses, forced bfloat16
said to be emulated where the CPU has none, unknown values refused by name."""

import pytest

from vtx.precision import DecodingPrecision, choose_decoding_precision

ZEN1 = {"avx2", "fma"}
SAPPHIRE_RAPIDS = {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}
GENOA = {"avx2", "avx512f", "avx512_bf16"}


def never_measured():
    raise AssertionError("timed where the flags settle it")


def test_auto_decodes_in_bfloat16_only_where_the_hardware_has_it():
    chosen = choose_decoding_precision("auto", "none", [], ZEN1, measure=never_measured)
    assert (chosen.policy, chosen.name) == ("float32", "float32")
    assert chosen.log_line() == ("precision: float32 (auto: the CPU has neither amx_bf16 nor "
                                 "avx512_bf16); quantize: none")
    chosen = choose_decoding_precision("auto", "int8", [], SAPPHIRE_RAPIDS,
                                       measure=never_measured)
    assert (chosen.name, chosen.quantize) == ("bfloat16", "int8")
    assert "amx_bf16" in chosen.reason
    assert choose_decoding_precision("auto", "none", [(8, 0)], ZEN1).name == "bfloat16"


def test_auto_times_bfloat16_on_a_cpu_with_avx512_bf16_but_no_amx():
    slower = choose_decoding_precision("auto", "none", [], GENOA,
                                       measure=lambda: (0.8, 0.008, 0.010))
    assert slower.name == "float32" and "--precision bfloat16 takes" in slower.reason
    faster = choose_decoding_precision("auto", "none", [], GENOA,
                                       measure=lambda: (1.5, 0.015, 0.010))
    assert faster.name == "bfloat16"


def test_forced_bfloat16_decodes_where_the_cpu_lacks_it_and_says_so():
    chosen = choose_decoding_precision("bfloat16", "none", [], ZEN1)
    assert chosen.policy == "mixed_bfloat16"
    assert "emulated, slower than float32" in chosen.log_line()
    assert "emulated" not in choose_decoding_precision("bfloat16", "none", [], GENOA).reason
    assert choose_decoding_precision("float32", "none", [], SAPPHIRE_RAPIDS).name == "float32"


def test_unknown_precisions_and_quantizations_are_refused_by_name():
    with pytest.raises(ValueError, match="precision must be one of auto, float32, bfloat16, "
                                         "got 'float16'"):
        choose_decoding_precision("float16", "none", [], ZEN1)
    with pytest.raises(ValueError, match="quantize must be one of none, int8, got 'int4'"):
        choose_decoding_precision("float32", "int4", [], ZEN1)
    with pytest.raises(ValueError, match="got 'mixed_float16'"):
        DecodingPrecision("mixed_float16")
