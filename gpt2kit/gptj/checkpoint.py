"""Reading GPT-J weights: transformers' directories (safetensors, or PyTorch .bin as
EleutherAI/gpt-j-6b ships them, one file or shards), hub names, random init.

Weights live in host memory as a dict of float32 NumPy arrays in the layout of
GPTJConfig.parameter_shapes. float16 and bfloat16 checkpoints are widened to float32.

* A transformers directory: config.json (model_type "gptj") and the weights. The
  q, k and v projections are stacked into one qkvw; nn.Linear stores (out, in)
  already, so nothing is transposed.
* Hub names: gpt-j-6b or EleutherAI/gpt-j-6b, downloaded through huggingface_hub into
  its cache (24 GB in float32).
* random:gpt-j-6b: transformers' initialisation, seeded (weights N(0, 0.02), biases 0,
  layernorm weights 1). 6B parameters take about two minutes to draw on a CPU and 24 GB
  of host memory, then 24 GB on the GPU.

transformers_model puts weights into transformers' GPTJForCausalLM, which the benchmarks
run beside the kit's model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpt2kit.gptj.config import PRESETS, ConfigError, GPTJConfig
from gpt2kit.model_runtime import checkpoint_files
from gpt2kit.model_runtime.checkpoint_files import (HF_PREFIX, CheckpointError, Parameters, Progress, Tenths,
                                                    download_from_hub, expect_shape, open_weights, read_json_object,
                                                    transformers_sizes)

HUB_REPOSITORIES = {"gpt-j-6b": "EleutherAI/gpt-j-6b"}

# name -> transformers' tensors (after "transformer."), one per layer; several are stacked along the rows
_HF_LAYER_TENSORS = {
    "ln1w": ("h.{l}.ln_1.weight",), "ln1b": ("h.{l}.ln_1.bias",),
    "qkvw": ("h.{l}.attn.q_proj.weight", "h.{l}.attn.k_proj.weight", "h.{l}.attn.v_proj.weight"),
    "attprojw": ("h.{l}.attn.out_proj.weight",),
    "fcw": ("h.{l}.mlp.fc_in.weight",), "fcb": ("h.{l}.mlp.fc_in.bias",),
    "fcprojw": ("h.{l}.mlp.fc_out.weight",), "fcprojb": ("h.{l}.mlp.fc_out.bias",),
}
_HF_GLOBAL_TENSORS = {"wte": "wte.weight", "lnfw": "ln_f.weight", "lnfb": "ln_f.bias",
                      "lm_headw": "lm_head.weight", "lm_headb": "lm_head.bias"}


def random_parameters(config: GPTJConfig, seed: int = 0, progress: Progress | None = None) -> Parameters:
    """transformers' GPT-J initialisation: weights N(0, 0.02), biases 0, layernorm weights 1."""
    return checkpoint_files.random_parameters(config.parameter_shapes(), _HF_LAYER_TENSORS, seed, progress)


def perturbed_parameters(config: GPTJConfig, seed: int) -> Parameters:
    """The init, plus noise on the biases and layernorm weights (checkpoint_files.perturbed)."""
    return checkpoint_files.perturbed(random_parameters(config, seed),
                                      ("ln1w", "ln1b", "fcb", "fcprojb", "lnfw", "lnfb", "lm_headb"), seed + 1)


def read_hf(directory: str | Path, progress: Progress | None = None) -> tuple[GPTJConfig, Parameters]:
    directory = Path(directory)
    config = config_from_hf(read_json_object(directory / "config.json"), directory / "config.json")
    tensors = open_weights(directory, torch_files=True)
    tenths = Tenths(progress, f"reading {directory}", 4 * config.num_parameters())
    params = {}
    for name, (shape, parts) in hf_layout(config).items():
        params[name] = np.empty(shape, np.float32)
        for index, hf_name in parts:
            tensor = tensors.load(hf_name)
            expect_shape(tensors, hf_name, tensor, params[name][index].shape)
            params[name][index] = tensor
            tenths.add(tensor.nbytes)
    return config, params


def hf_layout(config: GPTJConfig) -> dict[str, tuple[tuple[int, ...], list[tuple[tuple, str]]]]:
    """name -> (its shape, [(where in it, the transformers tensor that goes there)]), in parameter order."""
    layout = {}
    for name, shape in config.parameter_shapes().items():
        if name in _HF_GLOBAL_TENSORS:
            layout[name] = (shape, [((), _HF_GLOBAL_TENSORS[name])])
            continue
        patterns = _HF_LAYER_TENSORS[name]
        rows = shape[1] // len(patterns)
        layout[name] = (shape, [((layer, slice(part * rows, (part + 1) * rows)), pattern.format(l=layer))
                                for layer in range(config.num_layers) for part, pattern in enumerate(patterns)])
    return layout


def config_from_hf(raw: dict, where: Path | str) -> GPTJConfig:
    """The sizes of a transformers GPTJConfig (its config.json, or its to_dict()); `where` names it in errors."""
    if raw.get("model_type") != "gptj":
        raise CheckpointError(f"{where}: model_type is {raw.get('model_type')!r}, not 'gptj'")
    sizes = transformers_sizes(raw, where, ("n_layer", "n_head", "n_embd", "vocab_size", "n_positions", "rotary_dim"))
    try:
        return GPTJConfig(sizes["n_positions"], sizes["vocab_size"], sizes["n_layer"], sizes["n_head"],
                          sizes["n_embd"], sizes["rotary_dim"], raw.get("eos_token_id", 50256))
    except ConfigError as err:
        raise CheckpointError(f"{where}: {err}") from None


def load(source: str | Path, progress: Progress | None = None) -> tuple[GPTJConfig, Parameters]:
    """Weights from a transformers GPT-J directory, a hub name (gpt-j-6b, EleutherAI/gpt-j-6b), or
    random:gpt-j-6b (seeded init)."""
    text = str(source)
    if text.startswith("random:"):
        name = text.split(":", 1)[1]
        if name not in PRESETS:
            raise CheckpointError(f"unknown GPT-J size {name!r} (known: {', '.join(PRESETS)})")
        return PRESETS[name], random_parameters(PRESETS[name], seed=0, progress=progress)
    path = Path(source).expanduser()
    if (path / "config.json").exists():
        return read_hf(path, progress)
    repo_id = hub_repo_id(text)
    if repo_id is None:
        raise CheckpointError(f"{source}: not a GPT-J directory or model name ({', '.join(HUB_REPOSITORIES)})")
    return read_hf(download_from_hub(repo_id, torch_files=True), progress)


def hub_repo_id(name: str) -> str | None:
    """The hub repository of a GPT-J name (gpt-j-6b, EleutherAI/gpt-j-6b), else None."""
    return HUB_REPOSITORIES.get(name, name if name in HUB_REPOSITORIES.values() else None)


def transformers_model(config: GPTJConfig, params: Parameters, device: str = "cuda"):
    """transformers' GPTJForCausalLM holding `params`, float32, in eval mode, made on `device` (its own init,
    overwritten) and filled tensor by tensor: 6B parameters never go through a file. The model the benchmarks run
    beside the kit's."""
    import torch
    import transformers

    hf_config = transformers.GPTJConfig(n_layer=config.num_layers, n_head=config.num_heads, n_embd=config.channels,
                                        rotary_dim=config.rotary_dim, vocab_size=config.vocab_size,
                                        n_positions=config.max_T, bos_token_id=config.end_of_text,
                                        eos_token_id=config.end_of_text)
    with torch.device(device):
        model = transformers.GPTJForCausalLM(hf_config).eval()
    state = {name.removeprefix(HF_PREFIX): tensor for name, tensor in model.state_dict().items()}
    with torch.no_grad():
        for name, (_, parts) in hf_layout(config).items():
            for index, hf_name in parts:
                state[hf_name].copy_(torch.from_numpy(np.ascontiguousarray(params[name][index])))
    return model
