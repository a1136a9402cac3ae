"""The PyTorch twins of ember's MLP (nn::make_mlp): depth hidden Linear + ReLU layers and a
Linear classifier, PyTorch's default initialization (ember's is the same uniform bound)."""
import torch


def mlp(inputs, hidden, depth, outputs):
    layers, width = [], inputs
    for _ in range(depth):
        layers += [torch.nn.Linear(width, hidden), torch.nn.ReLU()]
        width = hidden
    layers.append(torch.nn.Linear(width, outputs))
    return torch.nn.Sequential(*layers)


def train_step_fn(model, optimizer, dtype):
    """One step: zero_grad, forward (under CPU autocast for bf16), cross-entropy, backward, step."""
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return step


def optimizer_variant(params, variant, lr=1e-3, weight_decay=1e-2):
    """AdamW as PyTorch offers it: 'foreach' (eager default), 'fused', or plain 'for-loop'."""
    if variant == "fused":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    if variant == "forloop":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=False)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=True)
