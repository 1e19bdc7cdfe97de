"""main_process_bound (info): a fast loader and a training step that burns CPU in the main
process. The loader keeps up; the step is the limit: healthy, with main_process_bound as info
and no advice about the loader.
Healthy twin (`--healthy`): the same loader and a slow consumer that waits (as on a GPU
step): quiet, no finding at all, verdict healthy.
"""

import time

from _common import Numbers, burn_cpu, consume, parser
from torch.utils.data import DataLoader


def main():
    args = parser(__doc__).parse_args()
    loader = DataLoader(Numbers(64), batch_size=16, num_workers=1)
    step = (lambda b: time.sleep(0.05)) if args.healthy else (lambda b: burn_cpu(0.05))
    print("batches:", consume(loader, args.seconds, step=step))


if __name__ == "__main__":
    main()
