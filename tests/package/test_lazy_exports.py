"""``_core.lazy.lazy_exports``, the ``__getattr__`` of ``guarded_sqlite`` and ``guarded_sqlite.evaluation``."""

from __future__ import annotations

from typing import Any

import pytest

from guarded_sqlite._core.lazy import lazy_exports


def test_a_lazy_name_is_imported_once_and_kept_in_the_namespace() -> None:
    namespace: dict[str, Any] = {}
    getattr_ = lazy_exports("guarded_sqlite", {"RuleDecision": "report"}, namespace)
    from guarded_sqlite.report import RuleDecision

    assert getattr_("RuleDecision") is RuleDecision
    assert namespace == {"RuleDecision": RuleDecision}


def test_any_other_name_raises_attribute_error_as_a_module_does() -> None:
    getattr_ = lazy_exports("guarded_sqlite.evaluation", {}, {})
    with pytest.raises(AttributeError, match=r"^module 'guarded_sqlite.evaluation' has no attribute 'nope'$"):
        getattr_("nope")
