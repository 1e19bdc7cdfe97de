"""straggler_rank: one rank's loader gates a data-parallel job. Run under torchrun with two
ranks (DDP over gloo, CPU): rank 1's samples each take `--cost-ms` of CPU to make (its shard
is heavier to decode), rank 0's are cheap; every step all-reduces the gradients, so rank 0
waits for rank 1 in the collective at every step.

Healthy twin (`--healthy`): both ranks' samples are cheap and their loaders keep up.
"""

from _common import Compute, parser
from _ddp import rank, start, train
from torch.utils.data import DataLoader, DistributedSampler

WIDTH = 8


def main():
    ap = parser(__doc__)
    ap.add_argument("--cost-ms", type=float, default=15.0, help="rank 1's CPU per sample")
    args = ap.parse_args()
    # 4 samples of 15 ms: one worker makes 60 ms batches against a 20 ms step on rank 1.
    slow = rank() == 1 and not args.healthy
    cost = args.cost_ms / 1e3 if slow else 0.0002
    dataset = Compute(cost, WIDTH)
    start()
    loader = DataLoader(
        dataset, batch_size=4, num_workers=1, sampler=DistributedSampler(dataset, shuffle=False)
    )
    train(loader, args.seconds, WIDTH)


if __name__ == "__main__":
    main()
