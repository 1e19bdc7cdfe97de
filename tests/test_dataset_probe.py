"""dldoctor.job.dataset_probe reads a dataset's large attributes without calling into it and
without reshaping it: no property, no __getattr__, no vars() (which on CPython 3.11+ turns
the instance's inline attributes into a dict for good, slowing every `self.x` of its
__getitem__ in every worker forked after the probe)."""

from __future__ import annotations

import gc
import sys

import pytest

torch = pytest.importorskip("torch")

from dldoctor.job import dataset_probe  # noqa: E402

INLINE = sys.version_info >= (3, 11)  # before 3.11 every instance has its dict from the start


def _inline(obj) -> bool:
    return not any(type(r) is dict for r in gc.get_referents(obj))


class Files(torch.utils.data.Dataset):
    def __init__(self, n):
        self.samples = [(f"img{i}.jpg", i % 10) for i in range(n)]
        self.table = torch.zeros(1 << 19)
        self._n = n

    def __len__(self):
        raise AssertionError("the probe called __len__")

    @property
    def boom(self):
        raise AssertionError("the probe read a property")

    def __getattr__(self, name):
        raise AssertionError(f"the probe asked __getattr__ for {name}")

    def __getitem__(self, i):
        return self.samples[i]


def _names(rec):
    return [a["name"] for a in rec["attrs"]]


def test_large_attributes_are_named_without_calling_the_dataset():
    ds = Files(5000)
    loader = torch.utils.data.DataLoader(ds, batch_size=4)
    rec = dataset_probe.dataset_record(loader)
    assert _names(rec) == ["table", "samples"]  # largest first; _n is too small to name
    samples = rec["attrs"][1]
    assert samples["elements"] == 5000 and samples["python_objects"] is True
    if INLINE:
        assert _inline(ds)
    assert [ds[i] for i in range(3)] == [("img0.jpg", 0), ("img1.jpg", 1), ("img2.jpg", 2)]


def test_a_wrapped_dataset_is_looked_into_and_stays_inline():
    ds = Files(3000)
    sub = torch.utils.data.Subset(ds, list(range(2000)))
    rec = dataset_probe.dataset_record(torch.utils.data.DataLoader(sub))
    assert set(_names(rec)) == {"dataset.table", "dataset.samples", "indices"}
    if INLINE:
        assert _inline(ds) and _inline(sub)


def test_an_instance_dict_that_exists_already_is_read_whole():
    ds = Files(10)
    vars(ds)  # the user's own code made it
    ds.cache = list(range(5000))  # set from outside the class: no method of it names it
    rec = dataset_probe.dataset_record(torch.utils.data.DataLoader(ds))
    assert "cache" in _names(rec)


def test_objects_without_instance_attributes():
    assert dataset_probe.instance_attrs(object()) == []
    assert dataset_probe.instance_attrs(list(range(3))) == []
    assert dataset_probe.instance_attrs(torch.zeros(2)) == []
