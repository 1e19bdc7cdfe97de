"""pinned_memory_pressure (info): a loader asks for pin_memory=True on a machine without an
accelerator. torch skips the pinning (and warns once), so the flag buys nothing: said once,
as info, with no advice that would change the loader's speed.

The warning case (pinned batches locking RAM while memory runs short) needs an accelerator:
without one nothing is pinned. Healthy twin (`--healthy`): the same loader, pin_memory=False.
"""

import time

from _common import Numbers, consume, parser
from torch.utils.data import DataLoader


def main():
    args = parser(__doc__).parse_args()
    loader = DataLoader(Numbers(), batch_size=16, num_workers=1, pin_memory=not args.healthy)
    print("batches:", consume(loader, args.seconds, lambda b: time.sleep(0.01)))


if __name__ == "__main__":
    main()
