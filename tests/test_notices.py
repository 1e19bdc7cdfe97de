"""The final report's word on the early notices printed while the job ran: one it confirms
is kept as confirmed; one it does not is named in its notes with when it was seen and until
when it held, never dropped without a word (issue 12)."""

from __future__ import annotations

from dldoctor.report import Report
from dldoctor.watcher.watcher import notice_text, resolve_notices

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
