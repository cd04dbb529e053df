import pytest

from tests.training.synthetic import epoch_maker, make_pairs
from vtx import config
from vtx import checkpoints
from vtx.training.precision import (choose_precision, cpu_flags, max_cpu_isa,
                                     resolve_precision)
from vtx.training.trainer import Trainer

CASCADE_LAKE = {"avx2", "avx512f", "avx512bw", "avx512_vnni"}
SAPPHIRE_RAPIDS = CASCADE_LAKE | {"avx512_bf16", "amx_bf16", "amx_tile"}
EPYC_GENOA = CASCADE_LAKE | {"avx512_bf16"}


@pytest.mark.parametrize("flags,expected", [
    (CASCADE_LAKE, "float32"), (set(), "float32"),
    (SAPPHIRE_RAPIDS, "mixed_bfloat16"), (EPYC_GENOA, "mixed_bfloat16"),
])
def test_auto_on_a_cpu_takes_bfloat16_only_with_native_support(flags, expected):
    precision, reason = choose_precision("auto", [], flags)
    assert precision == expected and "CPU" in reason


@pytest.mark.parametrize("cap,expected", [
    ("AVX512_CORE_VNNI", "float32"), ("avx2", "float32"),  # below bfloat16: as Cascade Lake
    ("AVX512_CORE_BF16", "mixed_bfloat16"), ("ALL", "mixed_bfloat16"),
])
def test_auto_follows_onednns_instruction_set_cap(monkeypatch, cap, expected):
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    precision, reason = choose_precision("auto", [], EPYC_GENOA, max_cpu_isa())
    assert precision == expected
    assert (f"ONEDNN_MAX_CPU_ISA={cap.upper()}" in reason) == (expected == "float32")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert max_cpu_isa() is None
    assert choose_precision("auto", [], CASCADE_LAKE, ("ONEDNN_MAX_CPU_ISA", "ALL"))[0] == \
        "float32"


@pytest.mark.parametrize("capabilities,expected", [
    ([(9, 0)], "mixed_bfloat16"), ([(8, 0), (8, 6)], "mixed_bfloat16"),
    ([(7, 0)], "float32"), ([(9, 0), (7, 5)], "float32"),  # the slowest GPU decides
])
def test_auto_on_gpus_takes_bfloat16_from_compute_capability_8(capabilities, expected):
    assert choose_precision("auto", capabilities, CASCADE_LAKE)[0] == expected


def test_a_named_precision_is_kept_whatever_the_hardware():
    assert choose_precision("mixed_float16", [(9, 0)], SAPPHIRE_RAPIDS) == ("mixed_float16",
                                                                          "as requested")
    assert resolve_precision("float32") == ("float32", "as requested")


def test_cpu_flags_are_read_from_the_first_processor(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 avx512_bf16\n\n"
                       "processor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(tmp_path / "missing") == set()


def test_trainer_records_and_logs_the_precision_auto_resolved_to(tmp_path):
    lines = []
    train_config = config.TrainConfig(precision="auto", max_steps=1, save_interval_minutes=0,
                                      validate_interval_steps=0)
    trainer = Trainer(config.preset("tiny", vocab_size=20), train_config, tmp_path,
                      log=lines.append)
    expected = resolve_precision("auto")[0]
    assert trainer.config.precision == expected != "auto"
    assert trainer.model.dtype_policy.name == expected
    assert lines[0].startswith(f"precision: {expected} (")
    trainer.fit(epoch_maker(make_pairs(8, 20), 4))
    saved = checkpoints.load(checkpoints.list_checkpoints(tmp_path)[-1])
    assert saved.meta["train_config"]["precision"] == expected
