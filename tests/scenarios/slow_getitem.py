"""Field guide cause 2: __getitem__ decodes full-size JPEGs and resizes them.

The images are made at start in a temporary folder. One worker, a light consumer.
Healthy twin (`--healthy`): the same images stored at training size (resized offline).
`--loader-per-epoch S`: the same loop written as many scripts write it, a new DataLoader each
epoch of S seconds (each epoch alone too short to judge): one loader to the doctor.
`--hf`: the same images in a Hugging Face `datasets.Dataset` (a column of paths) decoded by
its `set_transform` function, as Hugging Face's image recipes write it: datasets' own frames
wrap the job's function in every fetch; the fix must name the job's function.
"""

import os
import shutil
import tempfile
import time

import numpy as np
import torch
from _common import consume, parser
from PIL import Image
from torch.utils.data import DataLoader, Dataset

SIDE = 64


def write_jpegs(folder, count, size):
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0 : size[1], 0 : size[0]]
    paths = []
    for i in range(count):
        arr = (
            ((x * (i + 1) + y * 3) % 256)[..., None] + rng.integers(0, 40, (size[1], size[0], 3))
        ) % 256
        path = os.path.join(folder, f"{i}.jpg")
        Image.fromarray(arr.astype("uint8")).save(path, quality=90)
        paths.append(path)
    return paths


def decode_and_resize(path):
    with Image.open(path) as im:
        return im.convert("RGB").resize((SIDE, SIDE), Image.BILINEAR)


class Photos(Dataset):
    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths) * 1000

    def __getitem__(self, i):
        im = decode_and_resize(self.paths[i % len(self.paths)])
        return torch.from_numpy(np.asarray(im, dtype=np.float32)).permute(2, 0, 1)


def decode_batch(batch):
    """The set_transform function: decodes each path of the batch of rows it is given."""
    return {
        "pixel_values": [
            torch.from_numpy(np.asarray(decode_and_resize(p), dtype=np.float32)).permute(2, 0, 1)
            for p in batch["path"]
        ]
    }


def hf_dataset(paths):
    import datasets

    ds = datasets.Dataset.from_dict({"path": [paths[i % len(paths)] for i in range(12_000)]})
    ds.set_transform(decode_batch)
    return ds


def main():
    ap = parser(__doc__)
    ap.add_argument("--loader-per-epoch", type=float, default=0, metavar="S")
    ap.add_argument("--hf", action="store_true", help="a Hugging Face datasets.Dataset")
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="scenario-jpeg-")
    try:
        size = (SIDE, SIDE) if args.healthy else (1600, 1200)
        paths = write_jpegs(folder, 12, size)
        if args.loader_per_epoch:
            n, end = 0, time.monotonic() + args.seconds
            while time.monotonic() < end:
                loader = DataLoader(Photos(paths), batch_size=8, num_workers=1)
                n += consume(loader, min(args.loader_per_epoch, end - time.monotonic()))
            print("batches:", n)
            return
        dataset = hf_dataset(paths) if args.hf else Photos(paths)
        loader = DataLoader(dataset, batch_size=8, num_workers=1)
        print("batches:", consume(loader, args.seconds))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
