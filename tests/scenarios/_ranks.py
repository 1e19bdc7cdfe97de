"""A two-rank data-parallel job for `dldoctor attach` (tests/test_attach.py): run it with
`python -m torch.distributed.run --nproc-per-node 2 tests/scenarios/_ranks.py --seconds 30`.
Each rank trains a small model under DistributedDataParallel over gloo (CPU), fed by its own
DataLoader with one worker and a DistributedSampler.
"""

import os
import time

import torch
import torch.distributed as dist
from _common import Numbers, parser
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler


def main():
    args = parser(__doc__).parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dataset = Numbers()
    sampler = DistributedSampler(dataset, shuffle=False)
    loader = DataLoader(dataset, batch_size=16, num_workers=1, sampler=sampler)

    start, n, done = time.monotonic(), 0, torch.zeros(1)
    while not done.item():
        for batch in loader:
            opt.zero_grad()
            model(batch / 1e6).sum().backward()  # the gradients are all-reduced across ranks
            opt.step()
            n += 1
            # The ranks stop together: one that stopped alone would leave the other's
            # all-reduce without a peer.
            done.fill_(float(time.monotonic() - start > args.seconds))
            dist.all_reduce(done, op=dist.ReduceOp.MAX)
            if done.item():
                break
    print(f"rank {os.environ.get('RANK')} batches:", n)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
