"""Headless Chromium for tests, driven over the DevTools protocol on a pipe
(--remote-debugging-pipe: JSON messages ended by NUL on fds 3 and 4), so no websocket
library and no port are needed. Opens a page, records console errors, exceptions and every
request the page makes, evaluates JavaScript and takes screenshots."""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    def __init__(self, timeout_s: float = 30.0):
        exe = chromium_path()
        if exe is None:
            raise RuntimeError("no chromium on PATH (tools/install installs Debian's chromium)")
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="dldoctor-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds():
            # Through fresh numbers first, in case a pipe end already sits on 3 or 4.
            r, w = os.dup(to_child_r), os.dup(from_child_w)
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.proc = subprocess.Popen(
            [
                exe,
                "--headless",
                "--no-sandbox",  # root in a container
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-pipe",
                f"--user-data-dir={self.profile}",
                "about:blank",
            ],
            preexec_fn=fds,
            close_fds=False,  # close_fds would run after preexec_fn and close 3 and 4
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict] = []
        self.session: str | None = None
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)[
            "sessionId"
        ]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.call(f"{domain}.enable")

    # -- protocol --------------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, **params):
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params}
        if self.session and not method.startswith(("Target.", "Browser.")):
            msg["sessionId"] = self.session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self._next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def wait_for(self, method: str, since: int = 0) -> dict:
        deadline = time.monotonic() + self.timeout_s
        while True:
            for m in self.events[since:]:
                if m["method"] == method:
                    return m
            since = len(self.events)
            m = self._read_message(deadline)
            if "method" in m:
                self.events.append(m)

    # -- what the tests use ----------------------------------------------------------------
    def open(self, url: str) -> None:
        mark = len(self.events)
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired", since=mark)

    def evaluate(self, expression: str):
        r = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in r:
            raise RuntimeError(f"page script failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    def console_errors(self) -> list[str]:
        out = []
        for m in self.events:
            p = m.get("params", {})
            if m["method"] == "Runtime.exceptionThrown":
                out.append(str(p.get("exceptionDetails", {}).get("text")))
            elif m["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(
                    " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", []))
                )
            elif m["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out

    def requests(self) -> list[str]:
        return [
            m["params"]["request"]["url"]
            for m in self.events
            if m["method"] == "Network.requestWillBeSent"
        ]

    def screenshot(self, path: str, width: int = 1200, max_height: int | None = None) -> None:
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        if max_height:
            height = min(height, max_height)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.call("Emulation.setScrollbarsHidden", hidden=True)
        time.sleep(0.5)  # plotly's responsive charts redraw at the new width
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
