"""Strict loading: every bad input gives one clear SpecError naming file, key and allowed values."""

import json

import pytest

from planner.inputs.errors import SpecError
from planner.inputs.jobs import make_job
from planner.inputs.models import load_model
from planner.profiles.hardware import cluster_template_names, gpu_names, load_cluster, load_gpu

GOOD = """schema_version: 1
kind: model
name: tiny
num_layers: 4
hidden_size: 256
num_attention_heads: 4
vocab_size: 1000
max_position_embeddings: 512
"""


def write(tmp_path, text, name="m.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_good_model_file_loads(tmp_path):
    m = load_model(write(tmp_path, GOOD))
    assert m.ffn_hidden_size == 1024 and m.kv_channels == 64 and m.num_query_groups == 4


@pytest.mark.parametrize(
    "text, fragment",
    [
        (GOOD + "colour: red\n", "unknown key 'colour'"),
        (GOOD.replace("num_layers: 4\n", ""), "missing required key 'num_layers'"),
        (GOOD.replace("hidden_size: 256", "hidden_size: -256"), "'hidden_size': must be positive"),
        (GOOD.replace("hidden_size: 256", "hidden_size: big"), "'hidden_size': expected an integer"),
        (GOOD + "activation: tanh\n", "allowed values: gelu, relu, swiglu, geglu, squared_relu"),
        (GOOD.replace("schema_version: 1", "schema_version: 7"), "schema_version 7 is not supported"),
        (GOOD + "num_query_groups: 3\n", "num_attention_heads (4) must be divisible by num_query_groups (3)"),
        ("schema_version: 1\nkind: model\n  name: [unclosed\n", "malformed YAML"),
    ],
)
def test_bad_model_files_name_the_problem(tmp_path, text, fragment):
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_model(path)
    message = str(info.value)
    assert fragment in message
    assert path in message or "malformed" in message
    assert "\n" not in message


def test_unknown_preset_lists_presets():
    with pytest.raises(SpecError, match="unknown model 'no-such-model'.*llama3-70b"):
        load_model("no-such-model")


def test_catalogue_loads_and_is_cited():
    for name in gpu_names():
        gpu = load_gpu(name)
        assert gpu.memory_bytes > 0 and gpu.source
    for name in cluster_template_names():
        cluster = load_cluster(name, 2)
        assert cluster.num_gpus == 2 * cluster.groups[0].gpus_per_node
    required_gpus = {
        "a100-sxm4-40gb",
        "a100-sxm4-80gb",
        "h100-sxm5-80gb",
        "h100-pcie-80gb",
        "h200-sxm-141gb",
        "b200",
        "gb200",
        "mi300x",
        "l40s",
        "v100-sxm2-32gb",
    }
    assert required_gpus <= set(gpu_names())
    required_templates = {
        "dgx-a100",
        "dgx-a100-40gb",
        "dgx-h100",
        "dgx-h200",
        "dgx-b200",
        "gb200-nvl72",
        "aws-p4d",
        "aws-p5",
        "mi300x-node",
        "dgx1-v100",
    }
    assert required_templates <= set(cluster_template_names())


def test_template_needs_positive_nodes():
    with pytest.raises(SpecError, match="needs a node count"):
        load_cluster("dgx-h100", None)
    with pytest.raises(SpecError, match="must be positive"):
        load_cluster("dgx-h100", -2)


def test_heterogeneous_cluster_file(tmp_path):
    path = write(
        tmp_path,
        """schema_version: 1
kind: cluster
name: mixed
groups:
  - template: dgx-a100
    num_nodes: 2
  - template: dgx-h100
    num_nodes: 3
    inter_node_bandwidth_gb_per_s: 25
""",
        "c.yaml",
    )
    c = load_cluster(path)
    assert c.num_gpus == 40 and c.is_heterogeneous
    assert c.group_of_rank(15).gpu.name == "a100-sxm4-80gb"
    assert c.group_of_rank(16).gpu.name == "h100-sxm5-80gb"
    assert c.groups[1].inter_node_bandwidth_bytes_per_s == 25e9


def test_cluster_file_rejects_unknown_keys_and_gpus(tmp_path):
    path = write(
        tmp_path,
        "schema_version: 1\nkind: cluster\ngroups:\n  - template: dgx-a100\n    num_nodes: 1\n    colour: red\n",
        "c.yaml",
    )
    with pytest.raises(SpecError, match=r"unknown key 'groups\[0\].colour'"):
        load_cluster(path)
    path = write(
        tmp_path,
        "schema_version: 1\nkind: cluster\ngroups:\n  - template: dgx-a100\n    num_nodes: 1\n    gpu: tpu-v9\n",
        "d.yaml",
    )
    with pytest.raises(SpecError, match="unknown GPU 'tpu-v9'"):
        load_cluster(path)


def test_job_validation():
    with pytest.raises(SpecError, match="'global_batch_size': must be positive"):
        make_job(global_batch_size=0, seq_length=10)
    with pytest.raises(SpecError, match="allowed values: bf16, fp16, fp8"):
        make_job(global_batch_size=8, seq_length=10, precision="int4")


def test_hf_config_import(tmp_path):
    from tests.conftest import DATA

    m = load_model(str(DATA / "hf" / "mixtral-8x7b-v0.1" / "config.json"))
    assert (m.num_experts, m.moe_router_topk, m.moe_ffn_hidden_size) == (8, 2, 14336)
    assert m.params_total == pytest.approx(46.7e9, rel=0.005)
    q = load_model(str(DATA / "hf" / "qwen3-30b-a3b" / "config.json"))
    assert q.kv_channels == 128 and q.qk_layernorm and q.num_experts == 128
    assert q.params_active == pytest.approx(3.3e9, rel=0.03)
    g = load_model(str(DATA / "hf" / "gpt2" / "config.json"))
    assert g.params_total == pytest.approx(124.4e6, rel=0.003)
    n = load_model(str(DATA / "hf" / "nemotron-4-340b" / "config.json"))
    assert n.activation == "squared_relu" and n.normalization == "layernorm"
    for name, expected in [
        ("llama-2-7b", 6.74e9),
        ("meta-llama-3-70b", 70.55e9),
        ("mistral-7b-v0.1", 7.24e9),
        ("qwen2-7b", 7.62e9),
        ("qwen3-8b", 8.19e9),
        ("pythia-6.9b", 6.86e9),
        ("gemma-7b", 8.54e9),
    ]:
        assert load_model(str(DATA / "hf" / name / "config.json")).params_total == pytest.approx(
            expected, rel=0.005
        )


def test_hf_config_unsupported_type(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    with pytest.raises(SpecError, match="'model_type': 'bert' is not supported; allowed values: .*llama"):
        load_model(str(path))
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    with pytest.raises(SpecError, match="missing required key 'num_attention_heads'"):
        load_model(str(path))


@pytest.mark.parametrize("precision, grad", [("fp16", "fp16"), ("bf16", "fp32"), ("fp8", "fp32")])
def test_gradient_dtype_defaults_to_megatrons(precision, grad):
    job = make_job(global_batch_size=8, seq_length=1024, precision=precision)
    assert job.grad_dtype == grad
    assert (
        make_job(global_batch_size=8, seq_length=1024, precision=precision, grad_dtype="fp32").grad_dtype
        == "fp32"
    )


def test_bytes_per_parameter_match_megatrons_distributed_optimizer_table():
    """Megatron-LM docs/user-guide/features/dist_optimizer.md: fp16 parameters with fp16 gradients
    20 bytes (4 + 16/d distributed); bf16 parameters with fp32 gradients 18 (6 + 12/d)."""
    from cost_models.memory import bytes_per_param

    fp16 = make_job(global_batch_size=8, seq_length=1024, precision="fp16")
    bf16 = make_job(global_batch_size=8, seq_length=1024, precision="bf16")
    assert sum(bytes_per_param(fp16, "none", 1)) == 20
    assert sum(bytes_per_param(bf16, "none", 1)) == 18
    for d in (2, 8, 64):
        assert sum(bytes_per_param(fp16, "distributed", d)) == pytest.approx(4 + 16 / d)
        assert sum(bytes_per_param(bf16, "distributed", d)) == pytest.approx(6 + 12 / d)


def test_a_node_template_file_takes_a_node_count(tmp_path):
    """A copy of a built-in template (kind: cluster_template), edited, is used as the template is:
    with --nodes; without it, or a cluster file with it, is a one-line error saying which takes what."""
    from pathlib import Path

    from planner.profiles.hardware import is_template

    text = (
        Path(__file__).resolve().parent.parent / "hardware_profiles" / "clusters" / "dgx-h100.yaml"
    ).read_text()
    mine = write(
        tmp_path,
        text.replace("inter_node_bandwidth_gb_per_s: 50", "inter_node_bandwidth_gb_per_s: 25"),
        "mine.yaml",
    )
    c = load_cluster(mine, 4)
    builtin = load_cluster("dgx-h100", 4)
    assert c.num_gpus == builtin.num_gpus == 32 and c.name == "dgx-h100"
    g, b = c.groups[0], builtin.groups[0]
    assert g.inter_node_bandwidth_bytes_per_s == b.inter_node_bandwidth_bytes_per_s / 2
    assert g.intra_node_bandwidth_bytes_per_s == b.intra_node_bandwidth_bytes_per_s
    assert is_template(mine) and is_template("dgx-h100")
    with pytest.raises(SpecError, match="mine.yaml: a node template needs a node count"):
        load_cluster(mine)
    cluster = write(
        tmp_path,
        "schema_version: 1\nkind: cluster\ngroups:\n  - template: dgx-h100\n    num_nodes: 2\n",
        "c.yaml",
    )
    assert not is_template(cluster) and load_cluster(cluster).num_gpus == 16
    with pytest.raises(SpecError, match="do not pass --nodes .*kind: cluster_template, takes --nodes"):
        load_cluster(cluster, 2)


@pytest.mark.parametrize(
    "gpus_per_node, domain, ok",
    [(8, 8, True), (8, 2, True), (6, 3, True), (4, 72, True), (8, 12, False), (8, 6, False)],
)
def test_an_nvlink_domain_is_part_of_a_node_or_whole_nodes(tmp_path, gpus_per_node, domain, ok):
    text = (
        "schema_version: 1\nkind: cluster\ngroups:\n  - template: dgx-h100\n    num_nodes: 2\n"
        f"    gpus_per_node: {gpus_per_node}\n    nvlink_domain_size: {domain}\n"
    )
    path = write(tmp_path, text, "c.yaml")
    if ok:
        assert load_cluster(path).groups[0].nvlink_domain_size == domain
    else:
        with pytest.raises(
            SpecError, match=f"'groups\\[0\\].nvlink_domain_size': {domain} GPUs neither divides"
        ):
            load_cluster(path)
