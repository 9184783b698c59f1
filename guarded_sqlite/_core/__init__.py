"""The stdlib-only building blocks every layer uses: the probe's verdicts (``probe``), the buffer
rows are served from (``serving``) and the watchdog behind every time limit (``deadlines``).
Imports nothing of the package but ``errors``."""
