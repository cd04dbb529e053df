import dataclasses

import numpy as np
import pytest

from tests.training.synthetic import epoch_maker, make_pairs
from vtx import config
from vtx import checkpoints
from vtx.training.precision import (MIN_MEASURED_SPEEDUP, agree, choose_precision, cpu_flags,
                                     matmul_speedup, max_cpu_isa, resolve_precision)
from vtx.training.trainer import Trainer

CASCADE_LAKE = {"avx2", "avx512f", "avx512bw", "avx512_vnni"}
SAPPHIRE_RAPIDS = CASCADE_LAKE | {"avx512_bf16", "amx_bf16", "amx_tile"}
EPYC_GENOA = CASCADE_LAKE | {"avx512_bf16"}  # avx512_bf16 without AMX: so is an Intel Xeon


def never_measured():
    raise AssertionError("timed bfloat16 where the CPU's flags decide")


@pytest.mark.parametrize("flags,expected", [
    (CASCADE_LAKE, "float32"), (set(), "float32"),
    (SAPPHIRE_RAPIDS, "mixed_bfloat16"), (EPYC_GENOA, "mixed_bfloat16"),
])
def test_auto_on_a_cpu_takes_bfloat16_only_with_native_support(flags, expected):
    precision, reason = choose_precision("auto", [], flags)
    assert precision == expected and "CPU" in reason


@pytest.mark.parametrize("flags,expected", [
    (CASCADE_LAKE, "float32"), (set(), "float32"), (SAPPHIRE_RAPIDS, "mixed_bfloat16")])
def test_flags_decide_without_timing_where_they_settle_it(flags, expected):
    """No bfloat16 instructions: float32; AMX: bfloat16 (2.56x float32 measured), untimed."""
    assert choose_precision("auto", [], flags, measure=never_measured)[0] == expected
    assert choose_precision("auto", [(9, 0)], EPYC_GENOA, measure=never_measured)[0] == \
        "mixed_bfloat16"


@pytest.mark.parametrize("speedup,expected", [
    (1.45, "mixed_bfloat16"), (MIN_MEASURED_SPEEDUP, "mixed_bfloat16"),
    (1.05, "float32"), (0.6, "float32"),  # 0.6: an Intel Xeon with avx512_bf16 and no AMX
])
def test_avx512_bf16_without_amx_takes_bfloat16_only_where_it_timed_faster(speedup, expected):
    times = []

    def measure():
        times.append(1)
        return speedup, 0.005, 0.005 / speedup

    precision, reason = choose_precision("auto", [], EPYC_GENOA, measure=measure)
    assert precision == expected and times == [1]
    assert f"{speedup:.2f}x float32's" in reason
    assert ("--precision mixed_bfloat16" in reason) == (expected == "float32")


def test_the_timing_multiplies_in_both_precisions_on_this_cpu():
    speedup, f32, bf16 = matmul_speedup(64, 32, 48, repeats=2)
    assert 0 < f32 < 1 and 0 < bf16 < 1 and speedup == pytest.approx(f32 / bf16)


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
    # Without XLA bfloat16 trained slower than float32 on an H100: float32 on every GPU.
    precision, reason = choose_precision("auto", capabilities, SAPPHIRE_RAPIDS, jit_compile=False)
    assert precision == "float32"
    assert ("--jit for bfloat16" in reason) == (expected == "mixed_bfloat16")


def test_a_named_precision_is_kept_whatever_the_hardware():
    assert choose_precision("mixed_float16", [(9, 0)], SAPPHIRE_RAPIDS) == ("mixed_float16",
                                                                          "as requested")
    assert resolve_precision("float32") == ("float32", "as requested")


@pytest.mark.parametrize("mine,others,expected", [
    ("mixed_bfloat16", [1.0, 1.0], "mixed_bfloat16"), ("float32", [0.0, 0.0], "float32"),
    ("mixed_bfloat16", [1.0, 0.0], "float32"), ("float32", [1.0, 1.0], "float32"),
])
def test_workers_train_in_bfloat16_only_where_every_one_chose_it(mine, others, expected):
    sent = []

    def gather(value):  # this worker is worker 0 of three
        sent.append(value)
        return [value, *others]

    precision, reason = agree(mine, "its own reason", gather)
    assert precision == expected and reason.startswith("its own reason")
    assert sent == [1.0 if mine == "mixed_bfloat16" else 0.0]
    if len(set([sent[0], *others])) > 1:
        assert "workers train alike" in reason


def test_a_named_precision_needs_no_agreement_between_workers():
    def gather(value):
        raise AssertionError("a collective for a precision the command line names")

    assert resolve_precision("mixed_bfloat16", gather=gather) == ("mixed_bfloat16", "as requested")


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
    expected = trainer.config.precision  # this CPU's flags, or its timing of bfloat16
    assert expected in ("float32", "mixed_bfloat16")
    assert trainer.model.dtype_policy.name == expected
    assert lines[0].startswith(f"precision: {expected} (")
    trainer.fit(epoch_maker(make_pairs(8, 20), 4))
    saved = checkpoints.load(checkpoints.list_checkpoints(tmp_path)[-1])
    assert saved.meta["train_config"]["precision"] == expected


def test_a_resumed_run_keeps_its_precision_where_auto_would_time_it():
    kept = ("float32", "run/checkpoint_00000100.npz")
    precision, reason = choose_precision("auto", [], EPYC_GENOA, measure=never_measured,
                                         resumed=kept)
    assert precision == "float32" and "kept from run/checkpoint_00000100.npz" in reason
    # Where the flags or the GPU settle it, they do, as on a new run.
    assert choose_precision("auto", [], SAPPHIRE_RAPIDS, resumed=kept)[0] == "mixed_bfloat16"
    assert choose_precision("auto", [(9, 0)], EPYC_GENOA, resumed=kept)[0] == "mixed_bfloat16"
    assert choose_precision("auto", [], CASCADE_LAKE,
                            resumed=("mixed_bfloat16", "x"))[0] == "float32"


def test_trainer_times_bfloat16_on_a_new_run_and_keeps_the_choice_when_resumed(tmp_path,
                                                                                monkeypatch):
    """A CPU with avx512_bf16 and no AMX (its flags mocked; the timing stubbed at 0.5x, then
    2x): float32 on the new run, float32 again when resumed, bfloat16 on another new run."""
    from vtx.training import precision as precision_module

    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: EPYC_GENOA)
    shapes = []

    def timed(speedup):
        def matmul_speedup(rows, inner, outer):
            shapes.append((rows, inner, outer))
            return speedup, 0.004, 0.004 / speedup
        return matmul_speedup

    model = config.preset("tiny", vocab_size=20)
    train_config = config.TrainConfig(precision="auto", max_steps=1, save_interval_minutes=0,
                                      validate_interval_steps=0)
    monkeypatch.setattr(precision_module, "matmul_speedup", timed(0.5))
    first = Trainer(model, train_config, tmp_path / "run", log=lambda line: None)
    assert first.config.precision == "float32"
    assert shapes == [(precision_module.TIMED_ROWS, model.d_model, model.d_ff)]
    first.fit(epoch_maker(make_pairs(8, 20), 4))

    monkeypatch.setattr(precision_module, "matmul_speedup", timed(2.0))
    lines = []
    resumed = Trainer(model, dataclasses.replace(train_config, max_steps=2), tmp_path / "run",
                      log=lines.append)
    assert resumed.config.precision == "float32" and "kept from" in lines[0]
    assert len(shapes) == 1
    assert Trainer(model, train_config, tmp_path / "new",
                   log=lambda line: None).config.precision == "mixed_bfloat16"


def test_a_checkpoints_meta_reads_alone(tmp_path):
    path = tmp_path / "checkpoint_00000001.npz"
    checkpoints.save(path, checkpoints.Checkpoint(model=[np.ones(3)], optimizer=[],
                                                  meta={"step": 1, "train_config": {},
                                                        "model_config": {"d_model": 8}}))
    meta = checkpoints.read_meta(path)
    assert meta["step"] == 1 and meta["train_config"] == {}
    path.write_bytes(path.read_bytes()[:40])
    assert checkpoints.read_meta(path) is None
    assert checkpoints.read_meta(tmp_path / "missing.npz") is None
