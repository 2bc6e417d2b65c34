"""torch.nn.MultiheadAttention and torch.nn.TransformerEncoderLayer, the references of
tests/layers/transformer_layers_test.cpp.

    torch_transformer_layers.py OUT.json NAME:KIND:N:T:E:HEADS:FF:ACTIVATION:NORM_FIRST:PADDED:CAUSAL:DTYPE:MODE...

KIND is mha (self_attn(x, x, x, need_weights=False)), encoder (TransformerEncoderLayer
with dim_feedforward FF, activation relu or gelu, norm_first 0 or 1) or stack (a
TransformerEncoder of two such layers and a final LayerNorm); all batch_first,
dropout 0, in MODE train (torch's slow path, the one with autograd) or eval (the forward
alone under no_grad, where torch 1.13 runs a TransformerEncoderLayer through its fused fast
path, torch._transformer_encoder_layer_fwd, when the heads are even). PADDED 1 passes a
key padding mask (about one key in four padded, key 0 always kept so that no query is left
without keys, where torch gives NaN); CAUSAL 1 the attention mask of True above the
diagonal. Every parameter is drawn from a seed (not torch's initialisation: biases and
layer-norm parameters away from 0 and 1 test more), in float64, then cast to DTYPE
(float32 or float64) with the input x and the output gradient dout. For each case: the
parameters under their state_dict names (and the names in torch's order), x, the mask as dpcore takes it (1 = attend,
0 = padding: torch's bool mask negated), dout, the output y and, in train mode, the
gradient of every parameter and of x, all flattened (exact in JSON).
"""
import json
import os
import sys

import torch


def random_parameters(module, gen):
    with torch.no_grad():
        for name, p in module.named_parameters():
            u = torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1
            parts = name.split(".")
            if len(parts) >= 2 and parts[-2].startswith("norm") and parts[-1] == "weight":
                p.copy_(1 + 0.2 * u)
            elif p.dim() == 2:
                p.copy_(u / p.shape[1] ** 0.5)
            else:
                p.copy_(0.3 * u)


def run_case(seed, kind, N, T, E, heads, ff, activation, norm_first, padded, causal, dtype, training):
    gen = torch.Generator().manual_seed(seed)
    if kind == "mha":
        module = torch.nn.MultiheadAttention(E, heads, dropout=0.0, batch_first=True, dtype=torch.float64)
    else:
        module = torch.nn.TransformerEncoderLayer(E, heads, dim_feedforward=ff, dropout=0.0, activation=activation,
                                                  batch_first=True, norm_first=norm_first, dtype=torch.float64)
        if kind == "stack":
            module = torch.nn.TransformerEncoder(module, 2, norm=torch.nn.LayerNorm(E, dtype=torch.float64))
    random_parameters(module, gen)
    x = torch.rand(N, T, E, generator=gen, dtype=torch.float64) * 2 - 1
    dout = torch.rand(N, T, E, generator=gen, dtype=torch.float64) * 2 - 1
    attend = torch.rand(N, T, generator=gen, dtype=torch.float64) > 0.25
    attend[:, 0] = True
    if not padded:
        attend.fill_(True)
    module = module.to(dtype).train(training)
    x, dout = x.to(dtype).requires_grad_(training), dout.to(dtype)
    key_padding_mask = ~attend if padded else None
    attn_mask = torch.ones(T, T, dtype=torch.bool).triu(1) if causal else None
    with torch.set_grad_enabled(training):
        if kind == "mha":
            y = module(x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask, need_weights=False)[0]
        elif kind == "encoder":
            y = module(x, src_mask=attn_mask, src_key_padding_mask=key_padding_mask)
        else:
            y = module(x, mask=attn_mask, src_key_padding_mask=key_padding_mask)
    flat = lambda t: t.detach().flatten().tolist()
    record = {
        "names": list(module.state_dict().keys()),
        "shapes": {name: list(p.shape) for name, p in module.state_dict().items()},
        "params": {name: flat(p) for name, p in module.named_parameters()},
        "x": flat(x), "mask": flat(attend.to(dtype)), "dout": flat(dout), "y": flat(y),
    }
    if training:
        y.backward(dout)
        record.update(grads={name: flat(p.grad) for name, p in module.named_parameters()}, dx=flat(x.grad))
    return record


def main():
    out, specs = sys.argv[1], sys.argv[2:]
    results = {}
    for seed, spec in enumerate(specs, start=1):
        name, kind, N, T, E, heads, ff, activation, norm_first, padded, causal, dtype, mode = spec.split(":")
        results[name] = run_case(seed, kind, int(N), int(T), int(E), int(heads), int(ff), activation, norm_first == "1",
                                 padded == "1", causal == "1", getattr(torch, dtype), mode == "train")
    with open(out + ".tmp", "w") as f:
        json.dump(results, f)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
