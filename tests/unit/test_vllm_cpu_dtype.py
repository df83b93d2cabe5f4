"""The shipped CPU config's dtype, and the check behind the warning for bf16 on a CPU that only emulates it."""

from __future__ import annotations

from pathlib import Path

from hxd2_ray.config import VllmLLMConfig, load_config
from hxd2_ray.llm.vllm_setup import api_server_command, cpu_computes_bf16

ROOT = Path(__file__).resolve().parents[2]

CPUINFO = """processor\t: {n}
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu vme sse sse2 {extra}avx avx2 fma

"""


def _cpuinfo(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text("".join(CPUINFO.format(n=n, extra=extra) for n in range(2)))
    return path


def test_avx2_only_does_not_compute_bf16(tmp_path):
    assert cpu_computes_bf16(_cpuinfo(tmp_path, "")) is False
    assert cpu_computes_bf16(_cpuinfo(tmp_path, "avx512f avx512bw ")) is False  # AVX-512 without its bf16 part


def test_avx512_bf16_or_amx_computes_bf16(tmp_path):
    assert cpu_computes_bf16(_cpuinfo(tmp_path, "avx512f avx512_bf16 ")) is True
    assert cpu_computes_bf16(_cpuinfo(tmp_path, "amx_tile amx_bf16 ")) is True


def test_unreadable_or_flagless_cpuinfo_is_not_warned_about(tmp_path):
    assert cpu_computes_bf16(tmp_path / "missing") is True
    (tmp_path / "plain").write_text("processor\t: 0\n")
    assert cpu_computes_bf16(tmp_path / "plain") is True


def test_the_shipped_cpu_config_and_the_test_server_run_float32():
    cfg = load_config(ROOT / "hxd2_ray" / "config" / "local.yaml")
    assert isinstance(cfg.llm, VllmLLMConfig) and cfg.llm.dtype == "float32"
    command = api_server_command("python", "/models/m", "m", 8000)
    assert command[command.index("--dtype") + 1] == cfg.llm.dtype
