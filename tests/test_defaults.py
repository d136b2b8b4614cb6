"""``planner estimate`` and ``planner search`` price one configuration alike by default: the same
software profile (the framework's newest fitted on the cluster's GPUs) and the same predictions."""

from __future__ import annotations

import json

JOB = ("-m", "llama3-8b", "-c", "dgx-h100", "-n", "2", "-b", "64", "-s", "4096")


def test_estimate_prices_the_searched_configuration_as_search_does(run_cli):
    res = run_cli("search", *JOB, "--top", "2", "--json")
    assert res.exit_code == 0, res.stderr
    d = json.loads(res.stdout)
    for plan in d["plans"]:
        flags = [
            "--tp", str(plan["tp"]), "--pp", str(plan["pp"]), "--cp", str(plan["cp"]), "--ep", str(plan["ep"]),
            "--vpp", str(plan["vpp"]), "--micro-batch-size", str(plan["micro_batch_size"]),
            "--recompute", plan["recompute"], "--optimizer-sharding", plan["optimizer_sharding"],
            "--schedule", plan["schedule"],
        ]  # fmt: skip
        assert len(set(plan["layers_per_stage"])) == 1  # an even split: the estimate's default
        est = run_cli("estimate", *JOB, *flags, "--json")
        assert est.exit_code == 0, est.stderr
        e = json.loads(est.stdout)
        assert e["software"]["name"] == d["software"]["name"] == "megatron-bridge-25.11"
        assert e["step_time_s"] == plan["step_time_s"]
        assert e["tokens_per_s_per_gpu"] == plan["tokens_per_s_per_gpu"]
    base = json.loads(run_cli("estimate", *JOB, "--tp", "2", "--framework", "any", "--json").stdout)
    assert base["software"]["name"] == "base"
