"""Field guide cause 2, in collate_fn: a custom collate that does heavy work per batch.

Healthy twin (`--healthy`): the default collate.
"""

import torch
from _common import burn_cpu, consume, parser
from torch.utils.data import DataLoader, Dataset
from torch.utils.data._utils.collate import default_collate


class Small(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        return torch.full((32,), float(i))


def heavy_collate(samples):
    burn_cpu(0.04)  # e.g. padding/augmenting the whole batch in Python
    return default_collate(samples)


def main():
    args = parser(__doc__).parse_args()
    loader = DataLoader(
        Small(),
        batch_size=16,
        num_workers=1,
        collate_fn=None if args.healthy else heavy_collate,
    )
    print("batches:", consume(loader, args.seconds))


if __name__ == "__main__":
    main()
