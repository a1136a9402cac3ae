"""bench_train_step's work in PyTorch: one MLP training step (64 inputs, depth 4, 10 classes,
ReLU, cross-entropy, AdamW with fused=True, as the issue's goal names) at the same widths and
batches, f32 and bf16 autocast, in samples/s. With --device cuda, on the GPU, and with --graph
also the whole step (forward, backward, capturable fused AdamW) replayed as one CUDA graph: the
cuda_step_graph_* rows, PyTorch's fastest way to run this step."""

import torch

from common import argument_parser, emit, parse_args, seconds_per_call
from models import mlp, optimizer_variant, train_step_fn

SIZES = [(256, 4, 128), (512, 4, 256), (1024, 4, 512), (2048, 4, 512)]


def graphed_step(model, dtype, x, y):
    """The step captured once into a CUDA graph (PyTorch's documented whole-network recipe:
    warm-up on a side stream, then capture); returns a function that replays it."""
    optimizer = optimizer_variant(model.parameters(), "capturable")
    step = train_step_fn(model, optimizer, dtype, "cuda", graphed=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(x, y)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss = step(x, y)

    def replay():
        graph.replay()
        return loss

    return replay


def main():
    parser = argument_parser()
    parser.add_argument("--optimizer", default="fused", choices=["fused", "foreach", "forloop"])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--graph", action="store_true", help="cuda: also the CUDA-graph step")
    args = parse_args(parser)
    for width, depth, batch in SIZES:
        for dtype in args.dtypes:
            torch.manual_seed(1)
            x = torch.empty(batch, 64).uniform_(-1, 1).to(args.device)
            y = (torch.arange(batch) % 10).to(args.device)
            shape = f"width:{width}/depth:{depth}/batch:{batch}"
            model = mlp(64, width, depth, 10).to(args.device)
            step = train_step_fn(model, optimizer_variant(model.parameters(), args.optimizer),
                                 dtype, args.device)
            t = seconds_per_call(lambda: step(x, y).item(), args.min_time)
            emit("train_step", f"{args.device}_step_{dtype}/{shape}", batch / t, "samples/s")
            if args.device == "cuda" and args.graph:
                torch.manual_seed(1)
                replay = graphed_step(mlp(64, width, depth, 10).cuda(), dtype, x, y)
                t = seconds_per_call(lambda: replay().item(), args.min_time)
                emit("train_step", f"cuda_step_graph_{dtype}/{shape}", batch / t, "samples/s")


if __name__ == "__main__":
    main()
