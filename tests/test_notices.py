"""The final report's word on the early notices printed while the job ran: one it confirms
is kept as confirmed; one it does not is named in its notes with when it was seen and until
when it held, never dropped without a word (issue 12)."""

from __future__ import annotations

from dldoctor.report import Report
from dldoctor.watcher.watcher import (
    notice_change_text,
    notice_notes,
    notice_text,
    resolve_notices,
)

NOTICE = {
    "id": "too_many_workers",
    "title": "6 DataLoader workers share 2 usable CPUs",
    "seen_s": 7.0,
    "held_until_s": 12.0,
}


def test_a_notice_the_report_confirms():
    findings = [{"id": "too_many_workers", "severity": "critical"}]
    assert resolve_notices([NOTICE], findings) == [{**NOTICE, "confirmed": True}]


def test_a_notice_the_report_does_not_confirm_is_named_with_its_times():
    for findings in ([], [{"id": "too_many_workers", "severity": "info"}]):
        (n,) = resolve_notices([NOTICE], findings)
        assert n["confirmed"] is False
        text = notice_text(n)
        assert text.startswith("early notice too_many_workers (6 DataLoader workers"), text
        assert "seen at 7.0 s, no longer held after 12.0 s" in text, text
    once = notice_text({**NOTICE, "held_until_s": 7.0})
    assert "seen at 7.0 s, not held after it was seen" in once, once


def test_notices_travel_in_the_json_and_back():
    r = Report(verdict="healthy", notices=[{**NOTICE, "confirmed": False}])
    d = r.to_dict()
    assert d["notices"][0]["id"] == "too_many_workers"
    assert Report.from_dict(d).notices == r.notices
    assert "notices" not in Report(verdict="healthy").to_dict()  # additive: absent when none


SLOW = {
    "id": "slow_getitem",
    "title": "Loader 1: __getitem__ is too slow for the loop (1 worker supplies 4.3 batches/s, "
    "the loop wants 5)",
    "seen_s": 7.3,
    "held_until_s": 20.0,
}
FINAL = (
    "Loader 1: __getitem__ is too slow for the loop (1 worker supplies 4.3 batches/s, "
    "the loop wants 7.4)"
)


def test_a_confirmed_notice_with_other_figures_says_what_changed():
    # Issue 10: the notice said "the loop wants 5", the report "7.4", for the same run. The
    # notice looked at the last seconds before it, the report at the whole run: say so, and
    # which figure moved.
    findings = [{"id": "slow_getitem", "severity": "critical", "title": FINAL}]
    notices = resolve_notices([SLOW], findings)
    (note,) = notice_notes(notices, findings)
    head = "early notice slow_getitem at 7.3 s measured the 10 s before it; the report "
    assert note.startswith(head + "measures the whole run: "), note
    assert note.endswith("the loop wants 5 -> 7.4"), note
    assert "4.3" not in note  # an unchanged figure is not listed
    both = notice_change_text(SLOW, FINAL.replace("4.3", "4.1"))
    assert both.endswith(": worker supplies 4.3 -> 4.1 batches/s; the loop wants 5 -> 7.4"), both
    # The same words: nothing to say. A notice not confirmed: notice_text, as before.
    same = [{**findings[0], "title": SLOW["title"]}]
    assert notice_notes(resolve_notices([SLOW], same), same) == []
    (gone,) = notice_notes(resolve_notices([SLOW], []), [])
    assert gone == notice_text({**SLOW, "confirmed": False})


def test_a_reworded_notice_quotes_both():
    text = notice_change_text(SLOW, "Loader 1: the workers queue for the CPUs")
    assert 'the notice said "Loader 1: __getitem__' in text
    assert 'the whole run "Loader 1: the workers queue for the CPUs"' in text
