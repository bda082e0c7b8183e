"""A small progress bar for long commands, drawn only on a terminal (silent on a pipe,
file or CI log).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any, Optional

#: Redraw at most this often (seconds): a bar must not slow the work it shows.
REDRAW_EVERY = 0.1
_WIDTH = 30


class Progress:
    """A bar ``label [#####-----] done/total`` on ``stream`` (default stderr).

    Args:
        label: what is being done.
        total: how many steps in all (None: unknown; may be set later).
        stream: where to draw (default ``sys.stderr``).
        enabled: draw or not; default only when ``stream`` is a terminal.

    Thread-safe; a context manager, or call :meth:`close` to end the line.
    """

    def __init__(
        self, label: str, total: Optional[int] = None, *, stream: Optional[IO[str]] = None,
        enabled: Optional[bool] = None,
    ) -> None:  # fmt: skip
        self.label = label
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.done = 0
        self._lock = threading.Lock()
        self._drawn_at = 0.0
        self._drawn = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def advance(self, steps: int = 1) -> None:
        """Record ``steps`` more steps done."""
        with self._lock:
            self.done += steps
            self._draw()

    def update(self, done: int) -> None:
        """Set how many steps are done."""
        with self._lock:
            self.done = done
            self._draw()

    def child(self, label: str) -> "Progress":
        """A new bar on the same stream, drawn (or not) like this one, for the next phase."""
        self.close()
        return Progress(label, stream=self.stream, enabled=self.enabled)

    def close(self) -> None:
        """Draw the final state and end the line (nothing when disabled or never drawn)."""
        with self._lock:
            if self.enabled and self._drawn:
                self._draw(force=True)
                self.stream.write("\n")
                self.stream.flush()
                self._drawn = False

    def render(self) -> str:
        """The bar as text (what is drawn)."""
        if self.total:
            share = min(1.0, self.done / self.total)
            filled = int(share * _WIDTH)
            return f"{self.label} [{'#' * filled}{'-' * (_WIDTH - filled)}] {self.done}/{self.total}"
        return f"{self.label} {self.done}"

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        moment = time.monotonic()
        if not force and moment - self._drawn_at < REDRAW_EVERY:
            return
        self._drawn_at = moment
        self._drawn = True
        self.stream.write("\r" + self.render())
        self.stream.flush()


class watching:
    """Show the progress of work the sources do internally (embedding what is pending):
    a thread polls how much is still waiting and moves the bar."""

    def __init__(self, progress: Optional[Progress], remaining: Callable[[], int], total: int) -> None:
        self.progress = progress
        self.remaining = remaining
        self.total = total
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> "watching":
        if self.progress is not None and self.progress.enabled:
            self.progress.total = self.total
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def _poll(self) -> None:
        assert self.progress is not None
        while not self._stop.wait(0.25):
            try:
                self.progress.update(max(0, self.total - self.remaining()))
            except Exception:  # noqa: BLE001 - a bar must never break the work it shows
                return

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.progress is not None:
            if exc[0] is None:
                self.progress.update(self.total)
            self.progress.close()  # ends the bar's line before anything else is printed
