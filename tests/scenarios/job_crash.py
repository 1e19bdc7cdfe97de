"""A job that ends badly while its loader runs: the report must still be written.

The training step raises after 30 batches (the default), or the loop runs until it is
interrupted (`--forever`: it prints "ready" once batches flow, for a test to send Ctrl-C).
Healthy twin (`--healthy`): the same loop ends on its own after --seconds.
"""

import sys
import time

from _common import Numbers, parser
from torch.utils.data import DataLoader


def main():
    ap = parser(__doc__)
    ap.add_argument("--forever", action="store_true", help="run until interrupted")
    args = ap.parse_args()
    loader = DataLoader(Numbers(), batch_size=16, num_workers=1)
    start = time.monotonic()
    for n, _batch in enumerate(loader):
        time.sleep(0.01)
        if args.forever:
            if n == 20:
                print("ready", flush=True)
            continue
        if args.healthy and time.monotonic() - start > args.seconds:
            break
        if not args.healthy and n == 30:
            raise ValueError("loss is NaN at step 30")
    print("done", file=sys.stderr)


if __name__ == "__main__":
    main()
