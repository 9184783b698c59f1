"""The rules that act on a flagged result, on the data: rescue and the DISTINCT patches in the policy's
order (``patching``), join copies (``copies``), aggregate fan-out confirmed on the data (``fanout``)
and its reuse (``confirmations``). Imported lazily by ``_guard``."""
