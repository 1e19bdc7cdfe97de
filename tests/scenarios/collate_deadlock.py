"""Field guide cause 6: a collate_fn deadlocked on a lock inherited through fork.

A background thread of the main process holds a lock while the workers are forked; the
collate_fn takes that lock. Each forked worker gets a copy of the lock in its locked state
and no thread that could ever release it: the first batch never comes.
Healthy twin (`--healthy`): the same job with multiprocessing_context='spawn', where each
worker imports the module afresh and gets an unlocked lock.
"""

import threading
import time

from _common import Numbers, consume, parser
from torch.utils.data import DataLoader
from torch.utils.data._utils.collate import default_collate

stats_lock = threading.Lock()


def collate_with_stats(samples):
    with stats_lock:  # e.g. updating shared statistics
        return default_collate(samples)


def hold_lock_forever():
    with stats_lock:
        time.sleep(3600)


def main():
    args = parser(__doc__).parse_args()
    threading.Thread(target=hold_lock_forever, name="stats-writer", daemon=True).start()
    time.sleep(0.1)  # the thread now holds the lock
    loader = DataLoader(
        Numbers(),
        batch_size=4,
        num_workers=2,
        collate_fn=collate_with_stats,
        multiprocessing_context="spawn" if args.healthy else "fork",
    )
    print("batches:", consume(loader, args.seconds))


if __name__ == "__main__":
    main()
