"""Checks the torch.nn twin of Hugging Face's BERT (tests/layers/torch_bert.py) against
transformers itself: the benchmark-time half of issue 24's BERT parity (CI has no
transformers, so the parity tests run the twin; this shows the twin is transformers' BERT).

    bench/install-transformers.sh            # bench/.venv-transformers, pinned
    bench/.venv-transformers/bin/python scripts/check_bert_twin.py

For BertForSequenceClassification and BertForMaskedLM, at a small size and at bert-tiny's:
transformers' model, initialised by its own _init_weights, is copied into the twin
(load_state_dict, strict); then in float64, with dropout off, on the same padded inputs
with token types and an attention mask, both compute the logits and the gradients of the
mean cross-entropy. Prints, per case, whether the state_dict names and shapes are the same
(and which names transformers has that the twin does not hold as persistent state), and the
largest difference of the logits and of any parameter's gradient, each relative to that
tensor's largest magnitude. Exits 1 unless the names and shapes agree and every difference
is within 1e-12.
"""
import os
import sys

import torch
import torch.nn.functional as F
import transformers

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "layers"))
import torch_bert  # noqa: E402

TOLERANCE = 1e-12
SMALL = dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             max_position_embeddings=16, num_labels=3)
TINY = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512)


def inputs(vocab, n=3, t=12):
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, vocab, (n, t), generator=gen)
    mask = torch.ones(n, t, dtype=torch.long)
    for s in range(1, n):
        ids[s, t - 2 * s:] = 0
        mask[s, t - 2 * s:] = 0
    types = torch.zeros(n, t, dtype=torch.long)
    types[:, t // 2:] = 1
    return ids, types, mask


def relative(a, b):
    scale = b.abs().max().item()
    diff = (a - b).abs().max().item()
    return diff / scale if scale > 0 else diff


def check(name, fields, head):
    torch.manual_seed(1)
    hf_class = transformers.BertForMaskedLM if head == "mlm" else transformers.BertForSequenceClassification
    hf = hf_class(transformers.BertConfig(**fields)).double().eval()
    twin = torch_bert.build(torch_bert.Config(**fields), head).double().eval()
    hf_state, twin_state = hf.state_dict(), twin.state_dict()
    only_hf = sorted(set(hf_state) - set(twin_state))
    only_twin = sorted(set(twin_state) - set(hf_state))
    shapes = all(hf_state[k].shape == twin_state[k].shape for k in set(hf_state) & set(twin_state))
    # transformers 4.30 keeps embeddings.position_ids as persistent state; the twin, as
    # later transformers, does not (a non-persistent buffer, arange(max_position_embeddings)).
    allowed_only_hf = {"bert.embeddings.position_ids"}
    names_ok = not only_twin and set(only_hf) <= allowed_only_hf and shapes
    twin.load_state_dict({k: v for k, v in hf_state.items() if k in twin_state}, strict=True)
    ids, types, mask = inputs(fields.get("vocab_size", 30522))
    labels = ids.clone() if head == "mlm" else torch.arange(ids.size(0)) % fields.get("num_labels", 2)
    if head == "mlm":
        labels[mask == 0] = -100
    results = {}
    for label, model in (("transformers", hf), ("twin", twin)):
        model.zero_grad()
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=types)
        logits = out.logits if hasattr(out, "logits") else out
        F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=-100).backward()
        results[label] = (logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    (hf_logits, hf_grads), (twin_logits, twin_grads) = results["transformers"], results["twin"]
    logits_diff = relative(twin_logits, hf_logits)
    same_parameters = set(hf_grads) == set(twin_grads)
    grad_diff = max(relative(twin_grads[n], hf_grads[n]) for n in twin_grads if n in hf_grads)
    ok = names_ok and same_parameters and logits_diff <= TOLERANCE and grad_diff <= TOLERANCE
    print(f"{name:>20} {head:>14}: state_dict {len(hf_state)} names, "
          f"{'same names and shapes' if names_ok else 'DIFFERENT'} (only in transformers: {only_hf or 'none'}); "
          f"logits {logits_diff:.1e}, gradients {grad_diff:.1e} over {len(twin_grads)} parameters: "
          f"{'ok' if ok else 'FAILED'}")
    return ok


def main():
    print(f"transformers {transformers.__version__}, PyTorch {torch.__version__}, float64, tolerance {TOLERANCE}")
    ok = True
    for name, fields in (("small", SMALL), ("bert-tiny", TINY)):
        for head in ("classification", "mlm"):
            ok = check(name, fields, head) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
