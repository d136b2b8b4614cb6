"""Software profiles (planner.software, planner.fitting.fit_profile; issue 12 item 3)."""

from __future__ import annotations

import math

from planner.calibration import cases
from planner.fitting import family, predict, usable
from planner.software import CLASSES, apply, load_profiles, overrides, software_class


def test_release_class_of_a_run():
    assert software_class("megatron", "Megatron-Bridge / NeMo 25.11 container") == "megatron-bridge-25.11"
    assert software_class("megatron", "Megatron-Bridge / NeMo 26.04.01 container") == "megatron-bridge-26.04"
    assert software_class("torchtitan", "torchtitan 820504e (2025-06-13)") == "torchtitan-2025"
    assert software_class("megatron", None) == ""


def test_shipped_profiles_name_their_runs_and_only_override_numbers():
    profiles = load_profiles()
    assert sorted(profiles) == sorted(CLASSES)
    for name, data in profiles.items():
        assert data["framework"] == CLASSES[name][0]
        for fam in data["families"] or {}:
            assert set(overrides(name, fam)) <= {
                "gemm_efficiency_max",
                "fp8_gemm_speedup",
                "kernel_overhead_s",
                "comm_overlap_slowdown",
            }


def test_profile_lowers_the_error_of_its_own_runs_vs_base():
    runs = [c for c in usable(cases()) if c.software == "torchtitan-2025" and family(c) == "h100-96gb"]
    assert len(runs) >= 3
    base = runs[0].cluster.groups[0].gpu.efficiency  # already under the profile

    def err(eff):
        return sum(abs(math.log(predict(c, eff).predicted / c.measured_tokens_per_s_per_gpu)) for c in runs)

    with_profile = err(base)
    from planner.loading import load_gpu

    shipped = load_gpu(runs[0].gpu).efficiency
    assert apply(shipped, "torchtitan-2025", "h100-96gb") == base
    assert with_profile < err(shipped)
