"""Issue 25, items 3 and 4: profiles derived from a config.json (planner/hf_config.py), the one
name resolver (planner/perf/names.py), and hostile input to both (one line, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.catalog import load_catalog
from planner.cli import main
from planner.errors import InputError
from planner.hf_config import UnsupportedArchitecture, profile_from_config, profile_from_file
from planner.perf.names import (
    SAME_ARCHITECTURE,
    AmbiguousName,
    device_id,
    device_variant,
    model_ref,
    resolve_device,
)

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "models" / "llm" / "configs"
CAT = load_catalog()
HF_IDS = {m.hf_id: m.id for m in CAT.models.values()}

FIGURES = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "ffn_gated", "vocab_size",
           "tie_word_embeddings", "attention_bias", "qk_norm", "attention_sinks", "moe", "mla", "sliding_window",
           "sliding_window_layers", "native_weight_precision", "quantized_scope", "hybrid")
"""Every profile field the performance model reads, except max_context_tokens (the shipped
profiles take the model card's native context, a config gives max_position_embeddings)."""


def _same_figures(derived, shipped) -> None:  # type: ignore[no-untyped-def]
    if shipped.hybrid is not None and derived.hybrid is not None:  # the SSM state's precision is a serving choice the
        derived = derived.model_copy(update={"hybrid": derived.hybrid.model_copy(  # shipped profile states (its sources)
            update={"ssm_state_dtype": shipped.hybrid.ssm_state_dtype})})
    for field in FIGURES:
        assert getattr(derived, field) == getattr(shipped, field), (shipped.id, field)
    if derived.moe is None or derived.moe.first_dense_layers:
        assert derived.ffn_size == shipped.ffn_size, shipped.id
    assert derived.params_total() == shipped.params_total()
    assert derived.params_active() == shipped.params_active()
    assert derived.kv_bytes_per_token("bf16") == shipped.kv_bytes_per_token("bf16")
    assert derived.prefill_flops(1000.0, 500.0) == shipped.prefill_flops(1000.0, 500.0)


def _config_of(hf_id: str) -> Path | None:
    for path in CONFIGS.glob("*_config.json"):
        name = path.name.removesuffix("_config.json").replace("--", "/").lower()
        if name == hf_id.lower() or name == hf_id.lower().replace("/llama-3.1", "/meta-llama-3.1"):
            return path
    return None


SHIPPED_WITH_CONFIG = sorted(m.id for m in CAT.models.values() if _config_of(m.hf_id))


def test_every_shared_config_is_shipped_unchanged() -> None:
    shared = ROOT.parent / "shared" / "data" / "llm_configs"  # ../shared beside the repository (provenance check)
    if not shared.is_dir():
        pytest.skip("shared data folder not on this machine")
    for path in shared.glob("*_config.json"):
        assert (CONFIGS / path.name).read_bytes() == path.read_bytes(), path.name


def test_at_least_ten_more_profiles_come_from_configs() -> None:
    assert len(SHIPPED_WITH_CONFIG) >= 11 + 10


def _has_tower(path: Path) -> bool:
    return "vision_config" in json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("model_id", SHIPPED_WITH_CONFIG)
def test_config_gives_the_shipped_profile(model_id: str) -> None:
    """A config with a vision tower (Gemma 3) gives its language model only when asked (text_only)."""
    shipped = CAT.models[model_id]
    path = _config_of(shipped.hf_id)
    assert path is not None
    _same_figures(profile_from_file(path, hf_id=shipped.hf_id, text_only=_has_tower(path)), shipped)


def test_gemma3_text_model_of_a_vision_checkpoint() -> None:
    """Gemma 3 (12B, 27B) ships a SigLIP tower: without text_only it is the tower error; with it, the language
    model with 5 sliding-window layers per global one. The 27B's published text_config omits vocab_size and
    max_position_embeddings, so they come from the Gemma3TextConfig defaults; a key the config gives wins."""
    path = CONFIGS / "google--gemma-3-27b-it_config.json"
    with pytest.raises(UnsupportedArchitecture) as exc:
        profile_from_file(path)
    assert "vision tower" in exc.value.render()
    g27 = profile_from_file(path, text_only=True)
    assert "vocab_size" not in json.loads(path.read_text(encoding="utf-8"))["text_config"]
    assert (g27.vocab_size, g27.max_context_tokens, g27.sliding_window, g27.sliding_window_layers) == (262208, 131072, 1024, 52)
    assert (g27.tie_word_embeddings, g27.qk_norm, g27.head_dim) == (True, True, 128)
    g12 = profile_from_file(CONFIGS / "google--gemma-3-12b-it_config.json", text_only=True)
    assert (g12.sliding_window_layers, g12.num_layers, g12.head_dim) == (40, 48, 256)
    own = {"model_type": "gemma3_text", "num_hidden_layers": 6, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 16, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256, "sliding_window": 32}
    small = profile_from_config(own, source="cfg.json")
    assert (small.vocab_size, small.max_context_tokens, small.head_dim, small.num_kv_heads, small.sliding_window_layers) == (100, 256, 16, 2, 5)


@pytest.mark.parametrize("stem, target", [("deepseek-ai--DeepSeek-R1", "deepseek-v3"), ("meta-llama--Llama-3.3-70B-Instruct", "llama-3.1-70b")])
def test_same_architecture_entries_are_identical(stem: str, target: str) -> None:
    """The resolver maps these checkpoints to another profile only because the figures match."""
    hf = stem.replace("--", "/")
    assert model_ref(hf, HF_IDS).model_id == target
    assert SAME_ARCHITECTURE[hf.split("/")[1].lower().removesuffix("-instruct")] == target
    _same_figures(profile_from_file(CONFIGS / f"{stem}_config.json"), CAT.models[target])


def test_mixed_sliding_window_layers_and_moe_fields() -> None:
    g = profile_from_file(CONFIGS / "google--gemma-2-9b_config.json")
    assert (g.sliding_window, g.sliding_window_layers, g.tie_word_embeddings) == (4096, 21, True)
    scout = profile_from_file(CONFIGS / "meta-llama--Llama-4-Scout-17B-16E-Instruct_config.json")
    assert scout.moe is not None and (scout.moe.num_experts, scout.moe.experts_per_token, scout.moe.num_shared_experts) == (16, 1, 1)
    assert (scout.sliding_window, scout.sliding_window_layers) == (8192, 36)
    maverick = profile_from_file(CONFIGS / "meta-llama--Llama-4-Maverick-17B-128E-Instruct_config.json")
    assert maverick.moe is not None and (maverick.moe.moe_layer_step, maverick.moe_layers(), maverick.ffn_size) == (2, 24, 16384)
    kimi = profile_from_file(CONFIGS / "moonshotai--Kimi-K2-Instruct_config.json")
    assert kimi.mla is not None and kimi.mla.kv_lora_rank == 512 and kimi.moe is not None and kimi.moe.first_dense_layers == 1


def test_phi3_small_block_sparse_layers_counted_dense() -> None:
    """Issue 25: Phi-3-small's config (model_type phi3small) gives a dense GQA profile: 32 layers, hidden 4096,
    32 query / 8 KV heads of 128, gated FFN from ff_intermediate_size 14336, vocabulary 100,352 with the head
    tied (no tie_word_embeddings key: the PretrainedConfig default), 7.39 B parameters (card: "7B"); its 16
    block-sparse layers are counted dense and the profile says up to which context that is exact (16 local
    blocks x 64 tokens = 1,024)."""
    phi = profile_from_file(CONFIGS / "microsoft--Phi-3-small-8k-instruct_config.json", hf_id="microsoft/Phi-3-small-8k-instruct")
    assert (phi.num_layers, phi.hidden_size, phi.num_attention_heads, phi.num_kv_heads, phi.head_dim) == (32, 4096, 32, 8, 128)
    assert (phi.ffn_size, phi.ffn_gated, phi.vocab_size, phi.tie_word_embeddings, phi.sliding_window) == (14336, True, 100352, True, None)
    assert phi.params_total() == 32 * (4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096) + 100352 * 4096 + 4096
    assert abs(phi.params_total() / 7.0e9 - 1.0) < 0.06  # the card's size class "7B"
    assert "16 of 32 layers use block-sparse attention" in phi.notes and "exact up to 1024 tokens" in phi.notes
    with pytest.raises(UnsupportedArchitecture, match="lightning indexer"):
        profile_from_config({**BASE, "model_type": "deepseek_v32"}, source="cfg.json")


BASE = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
        "vocab_size": 100, "max_position_embeddings": 256}


@pytest.mark.parametrize("change, words", [
    ({"model_type": "nemotron_h", "num_key_value_heads": 2}, "hybrid_override_pattern: is missing"),
    ({"model_type": "nemotron_h", "num_key_value_heads": 2, "hybrid_override_pattern": "ME"}, "mixture-of-experts blocks 'E'"),
    ({"model_type": "nemotron_h", "num_key_value_heads": 2, "hybrid_override_pattern": "M-"}, "no attention block"),
    ({"model_type": "nemotron_h", "num_key_value_heads": 2, "hybrid_override_pattern": "M*-"}, "has 3 blocks, num_hidden_layers is 2"),
    ({"model_type": "jamba"}, "state-space (Mamba) layers mixed with attention"),
    ({"model_type": "falcon_h1"}, "state-space (Mamba-2) heads beside attention"),
    ({"model_type": "qwen3_next"}, "linear-attention (Gated DeltaNet) layers"),
    ({"model_type": "minimax_m1"}, "linear (lightning) attention layers"),
    ({"model_type": "qwen3_next"}, "linear-attention"),
    ({"layer_types": ["full_attention", "linear_attention"]}, "linear_attention"),
    ({"hybrid_override_pattern": "M*M*"}, "state-space"),
    ({"vision_config": {"hidden_size": 1}}, "vision tower"),
    ({"audio_config": {"hidden_size": 1}}, "audio tower"),
    ({"model_type": "whisper"}, "unknown architecture 'whisper'"),
    ({"num_hidden_layers": float("nan")}, "positive whole number"),
    ({"num_hidden_layers": float("inf")}, "positive whole number"),
    ({"hidden_size": "4096"}, "positive whole number"),
    ({"num_key_value_heads": 3}, "does not divide"),
    ({"num_local_experts": 8, "num_experts_per_tok": 2, "moe_layer_freq": 2}, "moe_layer_freq"),
    ({"num_local_experts": 8, "num_experts_per_tok": 2, "mlp_only_layers": [1]}, "interleaved"),
])
def test_unmodellable_configs_name_the_missing_piece(change: dict, words: str) -> None:
    with pytest.raises(UnsupportedArchitecture) as exc:
        profile_from_config({**BASE, **change}, source="cfg.json")
    assert words in exc.value.render()
    assert "\n" not in exc.value.render()


def _estimate(model: str, device: str = "h100-sxm") -> object:
    return CliRunner().invoke(main, ["estimate", "--model", model, "--device", device, "--tp", "1", "--isl", "100", "--osl", "10",
                                     "--concurrency", "1"])


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b"\xff\xfe", json.dumps({**BASE, "model_type": "mamba"}).encode(),
                                     json.dumps({**BASE, "num_hidden_layers": -3}).encode(), b'{"model_type": "llama"}', b"[" * 100000])
def test_hostile_config_is_one_line_exit_2(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(content)
    res = _estimate(str(path))
    assert res.exit_code == 2, res.output
    assert res.output.startswith("error: ") and res.output.count("\n") == 1, res.output


@pytest.mark.parametrize("model, device", [("Qwen3", "h100-sxm"), ("llama-3.1", "h100-sxm"), ("qwen3-8b", "H100"), ("nosuch/model", "h100-sxm"),
                                           ("qwen3-8b", "NVIDIA GH200 144GB")])
def test_ambiguous_or_unknown_names_are_one_line_exit_2(model: str, device: str) -> None:
    res = _estimate(model, device)
    assert res.exit_code == 2 and res.output.startswith("error: ") and res.output.count("\n") == 1, res.output
    if model in {"Qwen3", "llama-3.1"} or device == "H100":
        assert "ambiguous" in res.output and ("qwen3-8b" in res.output or "llama-3.1-8b" in res.output or "h100-pcie" in res.output)


def test_estimate_takes_a_hugging_face_id_a_config_path_or_an_id_alike() -> None:
    outs = []
    for ref in ("qwen3-8b", "Qwen/Qwen3-8B", str(CONFIGS / "Qwen--Qwen3-8B_config.json")):
        res = CliRunner().invoke(main, ["estimate", "--model", ref, "--device", "NVIDIA H100-SXM-80GB", "--tp", "1", "--isl", "500",
                                        "--osl", "50", "--concurrency", "4", "--json"])
        assert res.exit_code == 0, res.output
        data = json.loads(res.output)
        outs.append((data["ttft_ms"], data["tpot_ms"]))
    assert outs[0] == outs[1] == outs[2]


DEVICE_NAMES = {
    "NVIDIA H100-SXM-80GB": "h100-sxm", "NVIDIA H200-SXM-141GB-CTS": "h200-sxm", "NVIDIA H100-NVL-94GB": "h100-nvl",
    "NVIDIA H100-PCIe-80GB": "h100-pcie", "NVIDIA B200-SXM-180GB": "b200", "NVIDIA GB200": "gb200", "NVIDIA L40S": "l40s",
    "AMD Instinct MI300X-NPS1-SPX-192GB-750W": "mi300x", "AMD Instinct MI325X 256GB HBM3E": "mi325x",
    "NVIDIA DGX H100 (8x H100-SXM-80GB, TensorRT)": "h100-sxm", "Dell PowerEdge XE9680 (8x MI300X_192GB, vLLM)": "mi300x",
    "H100-SXM5-80GB": "h100-sxm", "B200": "b200", "H200-SXM-141GB": "h200-sxm", "MI355X": "mi355x",
    "NVIDIA H100 80GB HBM3": "h100-sxm", "NVIDIA A100-SXM4-80GB": "a100-sxm-80gb", "h100_sxm": "h100-sxm", "b200_sxm": "b200",
    "gb200_sxm": "gb200", "rtx_pro_6000_server": "rtx-pro-6000", "l40s": "l40s",
}


def test_device_names_resolve() -> None:
    ids = frozenset(CAT.devices)
    for name, want in DEVICE_NAMES.items():
        assert resolve_device(name, ids) == want, name
    for name in ("NVIDIA GH200 Grace Hopper Superchip 144GB", "Intel® Gaudi® 2 AI Accelerator", "TPU v5e", "N/A", "h20"):
        assert device_id(name, ids) is None, name
    memory = {k: float(d.memory_gb) for k, d in CAT.devices.items()}
    assert device_variant("A100-SXM4-40GB", memory) == ("a100-sxm-80gb", 40.0)
    assert device_variant("H100-SXM5-80GB", memory) == ("h100-sxm", None)
    with pytest.raises(AmbiguousName) as exc:
        device_id("NVIDIA H100", ids)
    assert exc.value.candidates == ["h100-nvl", "h100-pcie", "h100-sxm"]


MODEL_NAMES = {
    "meta-llama/Llama-3.1-8B-Instruct": ("llama-3.1-8b", None, None),
    "meta-llama/Meta-Llama-3.1-405B-Instruct": ("llama-3.1-405b", None, None),
    "meta-llama/Llama-3.1-405B-Instruct-FP8": ("llama-3.1-405b", "fp8", None),
    "Qwen/Qwen3-235B-A22B-Instruct-2507": ("qwen3-235b-a22b", None, None),
    "Qwen/Qwen3-235B-A22B-Thinking-2507-FP8": ("qwen3-235b-a22b", "fp8", None),
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": ("qwen3-30b-a3b", None, None),
    "deepseek-ai/DeepSeek-V3.1": ("deepseek-v3", None, None),
    "deepseek-ai/DeepSeek-V3-0324": ("deepseek-v3", None, None),
    "nvidia/DeepSeek-R1-0528-FP4": ("deepseek-v3", "fp4", None),
    "amd/Llama-3.1-70B-Instruct-FP8-KV": ("llama-3.1-70b", "fp8", "fp8"),
    "mistralai/Mixtral-8x7B-Instruct-v0.1": ("mixtral-8x7b", None, None),
    "mistralai/Mixtral-8x22B-Instruct-v0.1": ("mixtral-8x22b", None, None),
    "mistralai/Mistral-7B-Instruct-v0.3": ("mistral-7b-v0.3", None, None),
    "google/gemma-2-9b-it": ("gemma-2-9b", None, None),
    "moonshotai/Kimi-K2-Instruct-0905": ("kimi-k2", None, None),
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": ("llama-4-scout-17b-16e", None, None),
    "deepseek-ai/DeepSeek-V3.2": (None, None, None),          # sparse-attention indexer: not the V3 architecture
    "mistralai/Mistral-7B-Instruct-v0.1": (None, None, None),  # v0.1 has a sliding window, v0.3 none: different
    "Qwen/Qwen3-VL-30B-A3B-Instruct": (None, None, None),     # vision tower
    "google/codegemma-7b": ("gemma-7b", None, None),          # Gemma 7B trained further on code (SAME_ARCHITECTURE)
    "mistralai/Mistral-Large-Instruct-2407": ("mistral-large-2407", None, None),
    "google/gemma-3-27b-it": ("gemma-3-27b", None, None),    # its language model (the catalog profile says so)
    "bigcode/starcoder2-15b": ("starcoder2-15b", None, None),
}


def test_model_names_resolve() -> None:
    for name, want in MODEL_NAMES.items():
        ref = model_ref(name, HF_IDS)
        assert (ref.model_id, ref.weight_precision, ref.kv_precision) == want, name
    with pytest.raises(AmbiguousName) as exc:
        model_ref("Qwen/Qwen3", HF_IDS)
    assert "qwen3-8b" in exc.value.candidates and "qwen3-235b-a22b" in exc.value.candidates


def test_instance_accepts_a_hugging_face_id_and_names_bad_ones(tmp_path: Path) -> None:
    src = (ROOT / "planner" / "instances" / "code-completion-8b.yaml").read_text(encoding="utf-8")
    assert "model: llama-3.1-8b" in src
    (tmp_path / "traces").symlink_to(ROOT / "planner" / "instances" / "traces")
    for model, code, words in (("meta-llama/Llama-3.1-8B-Instruct", 0, "valid"), ("Qwen3", 2, "ambiguous"),
                               ("nvidia/NVIDIA-Nemotron-Nano-9B-v2", 0, "valid"),  # a Mamba-2 hybrid, modelled since issue 25
                               ("nvidia/Nemotron-H-8B-Base-8K", 2, "unknown model")):
        path = tmp_path / "inst.yaml"
        path.write_text(src.replace("model: llama-3.1-8b", f"model: {model}"), encoding="utf-8")
        res = CliRunner().invoke(main, ["check-instance", str(path)])
        assert res.exit_code == code, res.output
        assert words in res.output
        if code:
            assert "services.code.model" in res.output and res.output.count("\n") == 1


def test_resolve_model_errors_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        CAT.resolve_model(str(tmp_path / "missing_config.json"))


def test_energy_reader_names_ambiguous_and_impossible_rows(tmp_path: Path) -> None:
    """The energy reader resolves GPU and model names through the one resolver: an ambiguous GPU
    name or an impossible expert-parallel GPU count is a named skip, never a crash."""
    from planner.perf.energy_runs import read_energy_runs, resolve_runs

    src = (ROOT / "tests" / "data" / "energy" / "runs_fixture.csv").read_text(encoding="utf-8").splitlines()
    header, llama, ep = src[0], src[1], src[4]
    rows_text = [header, llama.replace("H100-SXM5-80GB", "H100"), ep.replace(",2,1,,1,2,", ",1e308,1,,1,1e308,"),
                 llama.replace("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3")]
    path = tmp_path / "runs.csv"
    path.write_text("\n".join(rows_text) + "\n", encoding="utf-8")
    _runs, reasons, _ = resolve_runs(read_energy_runs(path), CAT)
    assert "ambiguous" in reasons[0] and "h100-pcie" in reasons[0]
    assert "gpu_count" in reasons[1] and "not in (0, 4096]" in reasons[1]  # the reader's bound check (issue 24 fuzz I9)
    assert "ambiguous" in reasons[2] and "qwen3-8b" in reasons[2]


def test_importer_model_option_takes_a_config_path(tmp_path: Path) -> None:
    """`--model PATH/config.json` on the importers: the derived profile predicts like the catalog one."""
    cfg = tmp_path / "acme--Foo-8B_config.json"
    cfg.write_bytes((CONFIGS / "Qwen--Qwen3-8B_config.json").read_bytes())
    bench = ROOT / "tests" / "data" / "benchmarks" / "llmperf_summary.json"
    out = []
    for model in ("qwen3-8b", str(cfg)):
        res = CliRunner().invoke(main, ["validate-perf", str(bench), "--device", "h100-sxm", "--tp", "1", "--engine", "vllm",
                                        "--model", model, "--json"])
        assert res.exit_code == 0, res.output
        row = json.loads(res.stdout)["rows"][0]
        out.append((row["model"], row["pred_ttft_ms"], row["pred_tpot_ms"]))
    assert out[1][0] == "foo-8b" and out[0][1:] == out[1][1:]
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({**BASE, "model_type": "jamba"}), encoding="utf-8")
    res = CliRunner().invoke(main, ["validate-perf", str(bench), "--device", "h100-sxm", "--tp", "1", "--engine", "vllm", "--model", str(bad)])
    assert res.exit_code == 2 and "state-space" in res.output and res.output.count("\n") == 1, res.output


_DSV3 = Path(__file__).resolve().parent.parent / "models" / "llm" / "configs" / "deepseek-ai--DeepSeek-V3_config.json"
_QWEN_MOE = Path(__file__).resolve().parent.parent / "models" / "llm" / "configs" / "Qwen--Qwen3-30B-A3B_config.json"


@pytest.mark.parametrize("seed, key, value", [(_DSV3, "n_shared_experts", "-inf"), (_DSV3, "n_shared_experts", 2.5),
                                              (_DSV3, "first_k_dense_replace", "cpu"), (_DSV3, "first_k_dense_replace", float("nan")),
                                              (_DSV3, "first_k_dense_replace", [1, 2]), (_DSV3, "n_shared_experts", {"a": 1}),
                                              (_QWEN_MOE, "mlp_only_layers", 1e308), (_QWEN_MOE, "shared_expert_intermediate_size", "1e400")])
def test_hostile_moe_fields_are_one_line_exit_2(tmp_path: Path, seed: Path, key: str, value: object) -> None:
    """Found by ``python benchmarks/fuzz_readers.py --kind config --inputs 10000 --seed 2026`` (40 internal errors:
    ``int()`` of a string, NaN or a list in the MoE fields, ``sorted()`` of a number)."""
    cfg = json.loads(seed.read_text(encoding="utf-8"))
    cfg[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    res = _estimate(str(path))
    assert res.exit_code == 2, res.output
    assert res.output.startswith("error: ") and res.output.count("\n") == 1 and key in res.output, res.output
