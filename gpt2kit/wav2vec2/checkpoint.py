"""Wav2Vec2ForCTC's weights: a seeded random init, and conversion from transformers.

Parameters are a dict of float arrays (float32 unless asked otherwise) in the layout of
Wav2Vec2Config.parameter_shapes. From transformers, a Wav2Vec2ForCTC's state_dict (or any
name -> tensor mapping of it, its gradients too) converts with from_hf_state_dict: q, k and
v stacked into qkvw and qkvb, nn.Linear's (out, in) and nn.Conv1d's (OC, C / groups, K)
kept as they are. The positional convolution's weight norm is stored by torch under either
of two names, both read: parametrizations.weight.original0 and original1 (torch's
parametrizations, which transformers uses where torch has them), or weight_g and weight_v
(the older nn.utils.weight_norm). A transformers config converts with config_from_hf, and
our parameters back to a transformers state_dict with to_hf_state_dict (transformers_model:
transformers' Wav2Vec2ForCTC holding them).

    config, params = load("wav2vec2-base-960h")     # a transformers directory, a hub name, or random:base

reads real weights: a directory's config.json and model.safetensors (or
pytorch_model.bin, through torch), or a hub repository downloaded first.
"""

from __future__ import annotations

import numpy as np

from pathlib import Path

from gpt2kit.model_runtime import checkpoint_files
from gpt2kit.model_runtime.checkpoint_files import (CheckpointError, Parameters, Progress, download_from_hub,
                                                    open_weights, read_json_object)
from gpt2kit.wav2vec2.config import PRESETS, SUPPORTED, ConfigError, Wav2Vec2Config

_POS_CONV = "wav2vec2.encoder.pos_conv_embed.conv."
_LAYER = "wav2vec2.encoder.layers.{l}."

# name -> transformers' tensors; a name stacked over layers has one per layer ({l}), several stacked along the rows
_HF_LAYER_TENSORS = {
    "qkvw": tuple(_LAYER + f"attention.{p}_proj.weight" for p in "qkv"),
    "qkvb": tuple(_LAYER + f"attention.{p}_proj.bias" for p in "qkv"),
    "attprojw": (_LAYER + "attention.out_proj.weight",), "attprojb": (_LAYER + "attention.out_proj.bias",),
    "ln1w": (_LAYER + "layer_norm.weight",), "ln1b": (_LAYER + "layer_norm.bias",),
    "fcw": (_LAYER + "feed_forward.intermediate_dense.weight",),
    "fcb": (_LAYER + "feed_forward.intermediate_dense.bias",),
    "fcprojw": (_LAYER + "feed_forward.output_dense.weight",), "fcprojb": (_LAYER + "feed_forward.output_dense.bias",),
    "ln2w": (_LAYER + "final_layer_norm.weight",), "ln2b": (_LAYER + "final_layer_norm.bias",),
}
# name -> its transformers tensor, or the names it may have (weight norm's halves: torch's two spellings)
_HF_GLOBAL_TENSORS = {
    "gnw": "wav2vec2.feature_extractor.conv_layers.0.layer_norm.weight",
    "gnb": "wav2vec2.feature_extractor.conv_layers.0.layer_norm.bias",
    "ln_featw": "wav2vec2.feature_projection.layer_norm.weight",
    "ln_featb": "wav2vec2.feature_projection.layer_norm.bias",
    "projw": "wav2vec2.feature_projection.projection.weight", "projb": "wav2vec2.feature_projection.projection.bias",
    "pos_convb": _POS_CONV + "bias",
    "pos_conv_g": (_POS_CONV + "parametrizations.weight.original0", _POS_CONV + "weight_g"),
    "pos_conv_v": (_POS_CONV + "parametrizations.weight.original1", _POS_CONV + "weight_v"),
    "ln_encw": "wav2vec2.encoder.layer_norm.weight", "ln_encb": "wav2vec2.encoder.layer_norm.bias",
    "lm_headw": "lm_head.weight", "lm_headb": "lm_head.bias",
}
_HF_CONV = "wav2vec2.feature_extractor.conv_layers.{i}.conv.weight"
LINEAR_STD = 0.02  # transformers' initializer_range
HUB_REPOSITORIES = {"wav2vec2-base-960h": "facebook/wav2vec2-base-960h"}


def random_parameters(config: Wav2Vec2Config, seed: int = 0, progress: Progress | None = None) -> Parameters:
    """transformers' kind of init, seeded: linear weights N(0, 0.02), the feature encoder's convolutions He-normal,
    the positional convolution's v N(0, 2 / sqrt(K * C)) with g = ||v|| (the weight is v itself, as weight norm
    starts), biases 0, norm weights 1."""
    shapes, K, C = config.parameter_shapes(), config.pos_conv_kernel, config.channels
    stds = {f"conv{i}w": np.sqrt(2 / (C_in * kernel)) for i, (C_in, _, kernel, _) in enumerate(config.conv_layers())}
    stds["pos_conv_v"] = 2 / np.sqrt(K * C)
    params = checkpoint_files.random_parameters(shapes, _HF_LAYER_TENSORS, seed, progress, stds=stds)
    params["gnw"] = np.ones_like(params["gnw"])  # a norm's weight, which random_parameters knows by "ln" only
    params["pos_conv_g"] = np.sqrt((params["pos_conv_v"] ** 2).sum(axis=(0, 1), keepdims=True))
    return params


def perturbed_parameters(config: Wav2Vec2Config, seed: int) -> Parameters:
    """The init, plus noise on the biases, the norms' weights and weight norm's g (checkpoint_files.perturbed)."""
    names = [name for name in config.parameter_shapes() if name.endswith(("b", "_g")) or name.startswith(("ln", "gn"))]
    return checkpoint_files.perturbed(random_parameters(config, seed), names, seed + 1)


def from_hf_state_dict(config: Wav2Vec2Config, tensors, dtype=np.float32) -> Parameters:
    """The parameters of a transformers Wav2Vec2ForCTC's state_dict (name -> tensor or array; gradients by
    parameter name convert the same way), in `dtype`. CheckpointError for a tensor missing or of the wrong shape."""
    params = {}
    for name, shape in config.parameter_shapes().items():
        if name not in _HF_LAYER_TENSORS:
            params[name] = _array(tensors, _hf_names(name, 0, 0), shape, dtype)
            continue
        count = len(_HF_LAYER_TENSORS[name])
        part_shape = (shape[1] // count, *shape[2:])
        params[name] = np.stack([np.concatenate([_array(tensors, _hf_names(name, layer, part), part_shape, dtype)
                                                 for part in range(count)]) for layer in range(config.num_layers)])
    return params


def to_hf_state_dict(config: Wav2Vec2Config, params: Parameters, names) -> dict[str, np.ndarray]:
    """from_hf_state_dict's inverse: transformers' name -> array for each of our parameters, under the spelling of
    `names` (a transformers model's state_dict keys: weight norm's halves have two). A model's state_dict updated
    with it loads strictly: only what our parameters do not hold (SpecAugment's mask embedding) keeps its value."""
    tensors = {}
    for name in config.parameter_shapes():
        if name not in _HF_LAYER_TENSORS:
            spelled = [n for n in _hf_names(name, 0, 0) if n in names]
            if not spelled:
                raise CheckpointError(f"the transformers model has no tensor {' or '.join(_hf_names(name, 0, 0))}")
            tensors[spelled[0]] = params[name]
            continue
        for layer in range(config.num_layers):
            for part, piece in enumerate(np.split(params[name][layer], len(_HF_LAYER_TENSORS[name]))):
                tensors[_hf_names(name, layer, part)[0]] = piece
    return tensors


def transformers_config(config: Wav2Vec2Config):
    """transformers' config of `config`, in eval mode's terms: no dropout, LayerDrop or SpecAugment; CTC summed."""
    import transformers

    return transformers.Wav2Vec2Config(
        conv_dim=list(config.conv_dim), conv_kernel=list(config.conv_kernel), conv_stride=list(config.conv_stride),
        hidden_size=config.channels, num_hidden_layers=config.num_layers, num_attention_heads=config.num_heads,
        intermediate_size=config.intermediate_size, num_conv_pos_embeddings=config.pos_conv_kernel,
        num_conv_pos_embedding_groups=config.pos_conv_groups, vocab_size=config.vocab_size, hidden_dropout=0.0,
        activation_dropout=0.0, attention_dropout=0.0, feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0,
        mask_time_prob=0.0, ctc_loss_reduction="sum", attn_implementation="eager")


def transformers_model(config: Wav2Vec2Config, params: Parameters, device: str = "cuda"):
    """transformers' Wav2Vec2ForCTC of transformers_config(config) holding `params`, float32, in eval mode on
    `device`: the model the benchmarks run beside the kit's."""
    import torch
    import transformers

    model = transformers.Wav2Vec2ForCTC(transformers_config(config))
    state = model.state_dict()
    for name, array in to_hf_state_dict(config, params, state).items():
        state[name] = torch.from_numpy(np.ascontiguousarray(array, np.float32))
    model.load_state_dict(state)
    return model.to(device).eval()


def _hf_names(name: str, layer: int, part: int) -> tuple[str, ...]:
    """The names transformers may give part `part` of layer `layer` of our parameter `name`."""
    if name in _HF_LAYER_TENSORS:
        return (_HF_LAYER_TENSORS[name][part].format(l=layer),)
    if name.startswith("conv"):
        return (_HF_CONV.format(i=name[len("conv"):-1]),)
    names = _HF_GLOBAL_TENSORS[name]
    return names if isinstance(names, tuple) else (names,)


def _array(tensors, names: tuple[str, ...], shape: tuple[int, ...], dtype) -> np.ndarray:
    """The first of `names` that `tensors` holds, as an array of `dtype`, checked to be of `shape`."""
    for name in names:
        if name in tensors:
            array = np.asarray(tensors[name], dtype=dtype)  # a CPU torch tensor converts through __array__
            if array.shape != shape:
                raise CheckpointError(f"tensor {name} has shape {array.shape}, expected {shape}")
            return array
    raise CheckpointError(f"missing tensor {' or '.join(names)}")


def config_from_hf(raw: dict, where: str = "the transformers config") -> Wav2Vec2Config:
    """The sizes of a transformers Wav2Vec2Config (its config.json, or its to_dict()); `where` names it in errors.
    CheckpointError for a variant this model does not run (the exact GELU everywhere, CTC's blank at 0)."""
    if raw.get("model_type") != "wav2vec2":
        raise CheckpointError(f"{where}: model_type is {raw.get('model_type')!r}, not 'wav2vec2'")
    for field, value in {"hidden_act": "gelu", "feat_extract_activation": "gelu", "pad_token_id": 0,
                         "add_adapter": False}.items():
        if raw.get(field) != value:
            raise CheckpointError(f"{where}: {field} is {raw.get(field)!r}; this model runs {value!r} only")
    try:
        return Wav2Vec2Config(
            tuple(raw["conv_dim"]), tuple(raw["conv_kernel"]), tuple(raw["conv_stride"]), raw["hidden_size"],
            raw["num_hidden_layers"], raw["num_attention_heads"], raw["intermediate_size"],
            raw["num_conv_pos_embeddings"], raw["num_conv_pos_embedding_groups"], raw["vocab_size"],
            raw["layer_norm_eps"], **{field: raw[field] for field in SUPPORTED})
    except KeyError as err:
        raise CheckpointError(f"{where}: missing field {err.args[0]}") from None
    except ConfigError as err:
        raise CheckpointError(f"{where}: {err}") from None


def load(source: str | Path, progress: Progress | None = None) -> tuple[Wav2Vec2Config, Parameters]:
    """Weights from a transformers Wav2Vec2ForCTC directory, a hub name (wav2vec2-base-960h,
    facebook/wav2vec2-base-960h, or any repository id of such a model), or random:<preset> (seeded init; `wav2vec2`
    alone is random:base). Given `progress`, a random init says each tenth of its drawing."""
    text = "random:base" if str(source) == "wav2vec2" else str(source)
    if text.startswith("random:"):
        name = text.split(":", 1)[1]
        if name not in PRESETS:
            raise CheckpointError(f"unknown Wav2Vec2 size {name!r} (known: {', '.join(PRESETS)})")
        return PRESETS[name], random_parameters(PRESETS[name], progress=progress)
    path = Path(text).expanduser()
    if (path / "config.json").exists():
        return read_hf(path)
    if path.exists() or text.count("/") > 1:
        raise CheckpointError(f"{source}: not a transformers Wav2Vec2 directory (no config.json there)")
    return read_hf(download_from_hub(HUB_REPOSITORIES.get(text, text), torch_files=True))


def hub_repo_id(name: str) -> str | None:
    """The hub repository of a Wav2Vec2 name the kit knows (wav2vec2-base-960h, facebook/wav2vec2-base-960h), else
    None (load downloads any repository id; only these are known to be Wav2Vec2's)."""
    return HUB_REPOSITORIES.get(name, name if name in HUB_REPOSITORIES.values() else None)


def read_hf(directory: Path) -> tuple[Wav2Vec2Config, Parameters]:
    """A transformers Wav2Vec2ForCTC directory's config and weights (safetensors, or PyTorch's .bin)."""
    config = config_from_hf(read_json_object(directory / "config.json"), directory / "config.json")
    return config, from_hf_state_dict(config, _FileTensors(open_weights(directory, torch_files=True)))


class _FileTensors:
    """A weight file's tensors as from_hf_state_dict reads a state_dict: `name in`, and [name] loads it."""

    def __init__(self, files):
        self.files = files

    def __contains__(self, name: str) -> bool:
        return name in self.files.where

    def __getitem__(self, name: str):
        return self.files.load(name)
