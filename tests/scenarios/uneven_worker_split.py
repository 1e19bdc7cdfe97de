"""uneven_worker_split: an IterableDataset with fewer shards than workers.

The data is one shard; three workers each take the shards `shards[id::num_workers]`, as
webdataset and Hugging Face datasets deal them, so two workers get none and end their stream
at once while the third yields every batch. Each sample takes 10 ms (a sleep, like a read), a
batch of 4 40 ms: one worker cannot keep up with a 20 ms step, three could.
Healthy twin (`--healthy`): three shards, one for each worker.
`--source hf`: a Hugging Face `datasets` IterableDataset of `--shards` shards (`n_shards`), which
stops the workers it has no shard for. `--source webdataset`: tar shards read by webdataset,
batched in the dataset (`.batched(4)`, `batch_size=None`), the way its documentation loads them.
"""

import io
import os
import tarfile
import tempfile
import time

import torch
from _common import consume, parser
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

WORKERS = 3
SAMPLE_S = 0.010
BATCH = 4
PER_SHARD = 2000  # samples a shard (--shard-samples): 20 s of one worker


def slow(i: int) -> int:
    time.sleep(SAMPLE_S)
    return i


class Shards(IterableDataset):
    """Shard s holds samples s*PER_SHARD...; each worker reads the shards dealt to it."""

    def __init__(self, shards: int, per_shard: int):
        self.shards = list(range(shards))
        self.per_shard = per_shard

    def __iter__(self):
        info = get_worker_info()
        mine = self.shards[info.id :: info.num_workers] if info else self.shards
        for s in mine:
            for i in range(self.per_shard):
                yield torch.tensor(float(slow(s * self.per_shard + i)))


def hf_loader(shards: int, per_shard: int) -> DataLoader:
    import datasets

    datasets.logging.set_verbosity_error()  # its "Too many dataloader workers" warning
    ds = datasets.Dataset.from_dict({"i": list(range(shards * per_shard))})
    it = ds.to_iterable_dataset(num_shards=shards).map(lambda r: {"i": slow(r["i"])})
    return DataLoader(it.with_format("torch"), batch_size=BATCH, num_workers=WORKERS)


def webdataset_loader(shards: int, per_shard: int, folder: str) -> DataLoader:
    import webdataset as wds

    urls = []
    for s in range(shards):
        path = os.path.join(folder, f"shard-{s:04d}.tar")
        with tarfile.open(path, "w") as t:
            for j in range(per_shard):
                data = str(s * per_shard + j).encode()
                info = tarfile.TarInfo(f"{s:04d}{j:06d}.cls")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
        urls.append(path)
    ds = (
        wds.WebDataset(urls, shardshuffle=False, nodesplitter=None, empty_check=False)
        .to_tuple("cls")
        .map_tuple(lambda b: torch.tensor(float(slow(int(b)))))
        .batched(BATCH)
    )
    return DataLoader(ds, batch_size=None, num_workers=WORKERS)


def main():
    ap = parser(__doc__)
    ap.add_argument("--source", choices=("own", "hf", "webdataset"), default="own")
    ap.add_argument("--shards", type=int, help="shards of the data (default 1; --healthy: 3)")
    ap.add_argument("--shard-samples", type=int, default=PER_SHARD, help="samples a shard")
    args = ap.parse_args()
    shards = args.shards or (WORKERS if args.healthy else 1)
    with tempfile.TemporaryDirectory() as folder:
        if args.source == "hf":
            loader = hf_loader(shards, args.shard_samples)
        elif args.source == "webdataset":
            loader = webdataset_loader(shards, args.shard_samples, folder)
        else:
            loader = DataLoader(
                Shards(shards, args.shard_samples), batch_size=BATCH, num_workers=WORKERS
            )
        print("batches:", consume(loader, args.seconds))


if __name__ == "__main__":
    main()
