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


def train_step_fn(model, optimizer, dtype, device="cpu", graphed=False):
    """One step: zero_grad, forward (under autocast for bf16), cross-entropy, backward, step.
    A step to capture into a CUDA graph keeps no autocast cache (PyTorch's graph rule)."""
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=dtype == "bf16",
                            cache_enabled=not graphed):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return step


def optimizer_variant(params, variant, lr=1e-3, weight_decay=1e-2):
    """AdamW as PyTorch offers it: 'foreach' (eager default), 'fused', plain 'for-loop', or
    'capturable' (fused, its step count and lr on the device: what a CUDA graph replays)."""
    if variant == "fused":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    if variant == "capturable":
        return torch.optim.AdamW(params, lr=torch.tensor(lr, device="cuda"),
                                 weight_decay=weight_decay, fused=True, capturable=True)
    if variant == "forloop":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=False)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=True)
