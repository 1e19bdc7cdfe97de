"""A small real training job with a real input bottleneck, for the README's first command:

    dldoctor run -- python -m dldoctor.demo

Its Dataset decodes full-size JPEGs and resizes them in __getitem__ (field guide cause 2),
with one worker feeding a small model. Made at run time in a temporary folder; needs
torch and Pillow.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time


def progress():
    """A progress display on stdout (rich is dldoctor's own dependency)."""
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("demo: {task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[status]}"),
        TimeRemainingColumn(),
    )


def make_images(folder: str, count: int, size=(1600, 1200), bar=None) -> list[str]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    paths = []
    # Smooth gradients plus noise: compresses like a photo, decodes like one.
    y, x = np.mgrid[0 : size[1], 0 : size[0]]
    task = bar.add_task(f"writing {count} full-size JPEGs", total=count, status="") if bar else None
    for i in range(count):
        base = (x * (i + 1) + y * 3) % 256
        noise = rng.integers(0, 40, size=(size[1], size[0], 3))
        arr = ((base[..., None] + noise) % 256).astype("uint8")
        path = os.path.join(folder, f"img_{i:04d}.jpg")
        Image.fromarray(arr).save(path, quality=90)
        paths.append(path)
        if bar is not None:
            bar.advance(task)
    return paths


def decode_and_resize(path: str, side: int):
    """The slow step: decode a full-size JPEG, then resize it to training size."""
    from PIL import Image

    with Image.open(path) as im:
        return im.convert("RGB").resize((side, side), Image.BILINEAR)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=12.0, help="how long to train")
    ap.add_argument("--images", type=int, default=32)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args(argv)

    try:
        import numpy as np
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, Dataset
    except ImportError as e:
        print(f"demo: needs torch, numpy and Pillow ({e})", file=sys.stderr)
        return 2

    class Photos(Dataset):
        def __init__(self, paths, side=64):
            self.paths, self.side = paths, side

        def __len__(self):
            return len(self.paths) * 1000

        def __getitem__(self, i):
            im = decode_and_resize(self.paths[i % len(self.paths)], self.side)
            x = torch.from_numpy(np.asarray(im, dtype=np.float32) / 255.0).permute(2, 0, 1)
            return x, i % 10

    folder = tempfile.mkdtemp(prefix="dldoctor-demo-")
    try:
        with progress() as bar:
            paths = make_images(folder, args.images, bar=bar)
        loader = DataLoader(
            Photos(paths), batch_size=args.batch_size, shuffle=True, num_workers=args.workers
        )
        model = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.Flatten(), nn.LazyLinear(10)
        )
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        start, steps = time.monotonic(), 0
        with progress() as bar:
            task = bar.add_task(
                f"training for {args.seconds:.0f} s, num_workers={args.workers}",
                total=args.seconds,
                status="",
            )
            for x, y in loader:
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                steps += 1
                elapsed = time.monotonic() - start
                bar.update(
                    task,
                    completed=min(elapsed, args.seconds),
                    status=f"{steps} steps, {steps * args.batch_size / elapsed:.0f} images/s",
                )
                if elapsed > args.seconds:
                    break
        rate = steps * args.batch_size / (time.monotonic() - start)
        print(f"demo: {steps} steps, {rate:.0f} images/s", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
