"""A torch.nn twin of Hugging Face's BERT, for tests/layers/bert_parity_test.cpp.

    torch_bert.py MANIFEST.json

CI has Debian's PyTorch 1.13 and no `transformers`, so this file writes
BertForSequenceClassification and BertForMaskedLM with torch.nn in exactly the module
structure of transformers' modeling_bert.py (the eager attention), so that their state_dict
keys are Hugging Face's; scripts/check_bert_twin.py compares it with `transformers` itself.

The manifest lists cases; one process runs them all. Each case names a config (BertConfig's
fields), a head ("classification" or "mlm"), a dtype, a weights file (dpcore's state_dict,
safetensors), an inputs file ("x": int64 [N, T] or [N, 3, T] as dpcore takes it, "labels")
and an output file, and a mode:
  "grad"   one forward and backward of the mean cross-entropy (labels -100 ignored):
           "logits" and "grad.<name>" for every parameter;
  "adamw"  `steps` torch.optim.AdamW steps (weight decay off for biases and LayerNorm weights),
           the learning rate from get_linear_schedule_with_warmup's lambda, gradients clipped
           with torch.nn.utils.clip_grad_norm_, dropout off: "final.<name>" for every parameter.
Every output also carries, in its metadata, the twin's named_parameters() and state_dict()
keys, and the state_dict keys the dpcore file did not have (the tied aliases).
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from make_fixtures import load_safetensors, save_safetensors  # noqa: E402  (spec-checked reader and writer)

ACT2FN = {"gelu": nn.GELU(), "gelu_pytorch_tanh": nn.GELU(approximate="tanh")}


class Config:
    """transformers.BertConfig's fields that the model reads, with its defaults."""

    def __init__(self, **fields):
        self.vocab_size = 30522
        self.hidden_size = 768
        self.num_hidden_layers = 12
        self.num_attention_heads = 12
        self.intermediate_size = 3072
        self.hidden_act = "gelu"
        self.hidden_dropout_prob = 0.1
        self.attention_probs_dropout_prob = 0.1
        self.max_position_embeddings = 512
        self.type_vocab_size = 2
        self.initializer_range = 0.02
        self.layer_norm_eps = 1e-12
        self.pad_token_id = 0
        self.num_labels = 2
        for k, v in fields.items():
            if not hasattr(self, k):
                raise ValueError(f"unknown BertConfig field {k!r}")
            setattr(self, k, v)


class BertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.register_buffer("position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)),
                             persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(self.position_ids.size(), dtype=torch.long),
                             persistent=False)

    def forward(self, input_ids, token_type_ids=None):
        seq_length = input_ids.size(1)
        position_ids = self.position_ids[:, :seq_length]
        if token_type_ids is None:
            token_type_ids = self.token_type_ids[:, :seq_length].expand(input_ids.size(0), seq_length)
        inputs_embeds = self.word_embeddings(input_ids)
        token_type_embeddings = self.token_type_embeddings(token_type_ids)
        embeddings = inputs_embeds + token_type_embeddings
        position_embeddings = self.position_embeddings(position_ids)
        embeddings += position_embeddings
        embeddings = self.LayerNorm(embeddings)
        return self.dropout(embeddings)


class BertSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        attention_probs = self.dropout(attention_probs)
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (self.all_head_size,))


class BertSelfOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(self.dense(hidden_states))
        return self.LayerNorm(hidden_states + input_tensor)


class BertAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, hidden_states, attention_mask=None):
        return self.output(self.self(hidden_states, attention_mask), hidden_states)


class BertIntermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = ACT2FN[config.hidden_act]

    def forward(self, hidden_states):
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dropout(self.dense(hidden_states))
        return self.LayerNorm(hidden_states + input_tensor)


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, hidden_states, attention_mask=None):
        attention_output = self.attention(hidden_states, attention_mask)
        return self.output(self.intermediate(attention_output), attention_output)


class BertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden_states, attention_mask=None):
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask)
        return hidden_states


class BertPooler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states):
        return self.activation(self.dense(hidden_states[:, 0]))


class BertModel(nn.Module):
    def __init__(self, config, add_pooling_layer=True):
        super().__init__()
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        if attention_mask is None:
            attention_mask = torch.ones(input_ids.shape)
        dtype = self.embeddings.word_embeddings.weight.dtype
        # get_extended_attention_mask: [N, 1, 1, T], 0 where attended, the dtype's minimum where not.
        extended = attention_mask[:, None, None, :].to(dtype=dtype)
        extended = (1.0 - extended) * torch.finfo(dtype).min
        sequence_output = self.encoder(self.embeddings(input_ids, token_type_ids), extended)
        pooled_output = self.pooler(sequence_output) if self.pooler is not None else None
        return sequence_output, pooled_output


class BertForSequenceClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        _, pooled_output = self.bert(input_ids, attention_mask, token_type_ids)
        return self.classifier(self.dropout(pooled_output))


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = ACT2FN[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states):
        return self.LayerNorm(self.transform_act_fn(self.dense(hidden_states)))


class BertLMPredictionHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.decoder.bias = self.bias

    def forward(self, hidden_states):
        return self.decoder(self.transform(hidden_states))


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)

    def forward(self, sequence_output):
        return self.predictions(sequence_output)


class BertForMaskedLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight  # tie_weights()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        sequence_output, _ = self.bert(input_ids, attention_mask, token_type_ids)
        return self.cls(sequence_output)


def build(config, head):
    return BertForMaskedLM(config) if head == "mlm" else BertForSequenceClassification(config)


def model_inputs(x, config):
    """dpcore's [N, T] ids (mask ids != pad, types 0) or [N, 3, T] rows, as keyword arguments."""
    if x.dim() == 2:
        return {"input_ids": x, "attention_mask": (x != config.pad_token_id).long()}
    return {"input_ids": x[:, 0], "token_type_ids": x[:, 1], "attention_mask": x[:, 2]}


def loss_of(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=-100)


def decay_groups(model):
    """Hugging Face's fine-tuning groups: no weight decay for biases and LayerNorm weights."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(p)
    return decay, no_decay


def linear_schedule_with_warmup(warmup, total):
    """transformers.get_linear_schedule_with_warmup's lambda."""
    def lr_lambda(step):
        if step < warmup:
            return float(step) / float(max(1, warmup))
        return max(0.0, float(total - step) / float(max(1, total - warmup)))
    return lr_lambda


def run_case(case):
    dtype = {"float32": torch.float32, "float64": torch.float64}[case["dtype"]]
    config = Config(**case["config"])
    torch.manual_seed(0)
    model = build(config, case["head"]).to(dtype)
    weights = load_safetensors(case["weights"])
    missing, unexpected = model.load_state_dict({k: v.to(dtype) for k, v in weights.items()}, strict=False)
    if unexpected:
        raise SystemExit(f"{case['name']}: dpcore's file has tensors the twin does not: {unexpected}")
    tied = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    if set(missing) - tied:
        raise SystemExit(f"{case['name']}: dpcore's file lacks {sorted(set(missing) - tied)}")
    inputs = load_safetensors(case["inputs"])
    kwargs = model_inputs(inputs["x"], config)
    labels = inputs["labels"]
    out = {}
    model.eval()  # dropout off (eval changes nothing else in BERT)
    if case["mode"] == "grad":
        logits = model(**kwargs)
        loss_of(logits, labels).backward()
        out["logits"] = logits.detach()
        for name, p in model.named_parameters():
            out["grad." + name] = p.grad
    else:
        a = case["adamw"]
        decay, no_decay = decay_groups(model)
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": a["weight_decay"]},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=a["lr"], betas=(a["beta1"], a["beta2"]), eps=a["eps"])
        sched = torch.optim.lr_scheduler.LambdaLR(opt, linear_schedule_with_warmup(a["warmup"], a["steps"]))
        for step in range(a["steps"]):
            opt.zero_grad()
            loss_of(model(**kwargs), labels).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), a["clip"])
            opt.step()
            sched.step()
        for name, p in model.named_parameters():
            out["final." + name] = p.detach()
    metadata = {"named_parameters": json.dumps([n for n, _ in model.named_parameters()]),
                "state_dict": json.dumps(list(model.state_dict().keys())),
                "tied_aliases": json.dumps(sorted(missing))}
    save_safetensors({k: v.detach().contiguous() for k, v in out.items()}, case["out"], metadata)


def main():
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    for case in cases:
        run_case(case)


if __name__ == "__main__":
    main()
