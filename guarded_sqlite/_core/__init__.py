"""The stdlib-only building blocks every layer uses: the probe's verdicts (``probe``), the buffer
rows are served from (``serving``), the watchdog behind every time limit (``deadlines``) and the
packages' lazily imported exports (``lazy``).
Imports nothing of the package but ``errors``."""
