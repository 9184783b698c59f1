"""A tiny progress bar for stderr, so a long evaluation shows it is alive (no dependency needed).

It redraws one line with ``\\r``, at most every ``min_interval`` seconds, and only when enabled:
by default when the stream is a terminal, so logs and CI output stay free of carriage returns.
"""

from __future__ import annotations

import time
from typing import TextIO


class ProgressBar:
    """``[#######.......] 512/1034  49%  1.2s`` on one line of ``stream``."""

    def __init__(
        self,
        total: int,
        label: str = "",
        stream: TextIO | None = None,
        enabled: bool | None = None,
        width: int = 30,
        min_interval: float = 0.1,
    ) -> None:
        self.total = total
        self.label = label
        self.stream = stream
        if enabled is None:
            isatty = getattr(stream, "isatty", None)
            enabled = bool(stream is not None and isatty is not None and isatty())
        self.enabled = enabled and stream is not None
        self.width = width
        self.min_interval = min_interval
        self.done = 0
        self._started = time.perf_counter()
        self._last_draw = -float("inf")
        self._drawn_done = -1  # the count on screen, so close() does not redraw an identical line

    def advance(self, count: int = 1) -> None:
        """Record ``count`` more items done; redraw if enough time has passed."""
        self.done = min(self.total, self.done + count)
        now = time.perf_counter()
        if self.enabled and (now - self._last_draw >= self.min_interval or self.done == self.total):
            self._draw(now)

    def close(self) -> None:
        """Draw the final state and end the line."""
        if self.enabled:
            if self._drawn_done != self.done:
                self._draw(time.perf_counter())
            assert self.stream is not None
            self.stream.write("\n")
            self.stream.flush()

    def render(self, elapsed: float) -> str:
        """The bar's text for the current count."""
        fraction = 1.0 if self.total == 0 else self.done / self.total
        filled = round(fraction * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        prefix = f"{self.label} " if self.label else ""
        return f"{prefix}[{bar}] {self.done}/{self.total} {fraction:4.0%} {elapsed:5.1f}s"

    def _draw(self, now: float) -> None:
        assert self.stream is not None
        self.stream.write("\r" + self.render(now - self._started))
        self.stream.flush()
        self._last_draw = now
        self._drawn_done = self.done
