"""Field guide cause 1: CPU-bound workers, more of them than the cores they may use.

Six workers that compute in __getitem__ are pinned, with the main process, to one core.
Healthy twin (`--healthy`): one worker on that core, with work it can do within the step.

`--quota`: not pinned; the job runs in a cgroup whose CPU quota is one CPU (as in a container
started with `--cpus 1`, or a Kubernetes pod's CPU limit) on a machine of more cores: affinity
shows them all, the quota does not let the workers use them.

`--ddp` (run it under torchrun with two ranks): each rank is a DDP main process over gloo with
three such workers, all of both ranks on the one core; the node's workers are both ranks'.
"""

import os

from _common import Compute, consume, parser
from torch.utils.data import DataLoader


def main():
    ap = parser(__doc__)
    ap.add_argument("--ddp", action="store_true", help="a rank of a torchrun job (3 workers)")
    ap.add_argument("--quota", action="store_true", help="held by a CPU quota, not pinned")
    args = ap.parse_args()
    if not args.quota:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    workers = 1 if args.healthy else 3 if args.ddp else 6
    # 60 ms of CPU per batch: one core cannot feed the 20 ms step with any number of workers.
    # The twin's 12 ms per batch fits in the step, on the same single core.
    cost = 0.003 if args.healthy else 0.015
    if args.ddp:
        from _ddp import start, train
        from torch.utils.data import DistributedSampler

        dataset = Compute(cost)
        start()
        sampler = DistributedSampler(dataset, shuffle=False)
        train(
            DataLoader(dataset, batch_size=4, num_workers=workers, sampler=sampler),
            args.seconds,
            16,
        )
        return
    loader = DataLoader(Compute(cost), batch_size=4, num_workers=workers)
    print("batches:", consume(loader, args.seconds))


if __name__ == "__main__":
    main()
