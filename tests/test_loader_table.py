"""The per-loader table stays readable for any number of loaders: a real job with 300
short-lived loaders, each iterated in its own function (as a test suite makes), under
`dldoctor run`; its terminal report shows a few loader columns, the busiest first, every line
of the table with text in it, and one line that sums up the rest; the HTML report the same
way.
"""

from __future__ import annotations

import re
import sys
import textwrap

import pytest

pytest.importorskip("torch")

from doctor_run import run_doctor  # noqa: E402

JOB = (
    textwrap.dedent(
        """
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Items(Dataset):
        def __init__(self, n):
            self.n = n
        def __len__(self):
            return self.n
        def __getitem__(self, i):
            return torch.tensor([i])

    """
    )
    + "".join(  # 300 tests, each iterating its own DataLoader in its own function
        f"def test_{k}():\n    for batch in DataLoader(Items({40 if k == 149 else 6}), batch_size=2):"
        "\n        pass\n"
        for k in range(300)  # loader 150: the busiest, 20 batches; the others 3
    )
    + "for k in range(300):\n    globals()[f'test_{k}']()\n"
)

BOX = re.compile(r"^[\s\u2500-\u257f]*$")  # box-drawing characters and blanks only


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("loaders")
    script = tmp / "job.py"
    script.write_text(JOB)
    html = tmp / "report.html"
    r = run_doctor([sys.executable, str(script)], tmp, ["-q", "--html", str(html)], timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(r.report["loaders"]) == 300
    return r, html.read_text()


def _table(stderr: str) -> list[str]:
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("DataLoaders"))
    return lines[start:]


def test_the_terminal_table_is_readable_with_300_loaders(run):
    r, _ = run
    table = _table(r.stderr)
    shown = [int(x) for x in re.findall(r"loader (\d+)", table[1])]
    assert 1 <= len(shown) <= 6, table[:3]
    assert shown[0] == 150  # the busiest first
    assert len(table) < 20, "\n".join(table)
    # The header's rule is the one line without text (279 loaders once printed 12 such lines).
    assert len([line for line in table if BOX.match(line) and line.strip()]) == 1, table
    for label in ("batches seen", "batches/s", "data stall"):
        row = next(line for line in table if line.strip().startswith(label))
        assert len(re.findall(r"\d", row)) >= len(shown), row
    at = next(i for i, line in enumerate(table) if "more loaders not shown" in line)
    more = " ".join(line.strip() for line in table[at : at + 4])  # the line, wrapped
    assert more.startswith(f"{300 - len(shown)} more loaders")
    rest_batches = 20 * (150 not in shown) + 3 * (299 - (len(shown) - 1))
    assert f"{rest_batches} batches in all, 3 to 3 each" in more
    # The ids not shown, as ranges (which of the 3-batch loaders are shown depends on their
    # stall: any may be).
    rest = sorted(set(range(1, 301)) - set(shown))
    ranges, start = [], rest[0]
    for a, b in zip(rest, rest[1:] + [None]):
        if b != a + 1:
            ranges.append(str(a) if a == start else f"{start}-{a}")
            start = b
    assert "loaders " + ", ".join(ranges) in more, (ranges, more)


def test_the_html_table_is_bounded_too(run):
    _, html = run
    section = html[html.index("<h2>DataLoaders</h2>") :]
    section = section[: section.index("</p>") + 4]
    heads = re.findall(r"<th>loader (\d+)</th>", section)
    assert 1 <= len(heads) <= 12 and heads[0] == "150"
    assert f"{300 - len(heads)} more loaders not shown" in section
