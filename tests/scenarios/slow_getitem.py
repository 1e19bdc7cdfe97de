"""Field guide cause 2: __getitem__ decodes full-size JPEGs and resizes them.

The images are made at start in a temporary folder. One worker, a light consumer.
Healthy twin (`--healthy`): the same images stored at training size (resized offline).
`--loader-per-epoch S`: the same loop written as many scripts write it, a new DataLoader each
epoch of S seconds (each epoch alone too short to judge): one loader to the doctor.
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


def main():
    ap = parser(__doc__)
    ap.add_argument("--loader-per-epoch", type=float, default=0, metavar="S")
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
        loader = DataLoader(Photos(paths), batch_size=8, num_workers=1)
        print("batches:", consume(loader, args.seconds))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
