"""Candidate-aware rescue: when the probe flags the selected SQL, pick a better upstream candidate.

Text-to-SQL pipelines generate several candidate SQLs and select one. When the guard flags the
selection, a *rescuer* may choose another candidate instead. A rescuer is any callable that takes a
``RescueRequest`` and returns a candidate index, None (keep the selection), or a ``RescueChoice`` that
also reports usage. Two are provided:

- ``DupRatioSelector``: zero cost, no model. The healthy candidate (executed, non-empty,
  ``dup_ratio < tau_inject``) with the lowest duplication ratio; none healthy → keep the selection.
- ``LLMRescue``: the paper's judge prompt (appendix C) through litellm, temperature 0, 64 tokens, the
  first integer in range; every failure falls back to the selection with the reason. litellm is
  imported the first time a rescue actually runs.

This module builds prompts and parses answers as pure functions; running candidates belongs to the
connection (``proxy``) and the order of rescue and patches to ``patching``.
"""

from __future__ import annotations

import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "PAPER_PROMPT",
    "CandidatePreview",
    "DupRatioSelector",
    "LLMRescue",
    "RescueChoice",
    "RescueReport",
    "RescueRequest",
    "build_prompt",
    "parse_answer",
]

SQL_CHARS = 600
SCHEMA_CHARS = 1500
PREVIEW_ROWS = 3
PREVIEW_CHARS = 300


@dataclass(frozen=True)
class CandidatePreview:
    """One candidate SQL as the rescuer sees it: what executing it (read-only) gave."""

    index: int
    """Position in the ``candidates`` list the caller passed; -1 for the selected SQL itself."""

    sql: str
    """The candidate's SQL."""

    rows: int | None
    """Number of rows it returned; None when it failed or exceeded ``row_cap``."""

    unique_rows: int | None
    """Number of distinct rows; None when ``rows`` is None."""

    first_rows: tuple[Any, ...]
    """Its first few rows (at most 3), for the prompt."""

    error: str | None
    """``"ExceptionClass: message"`` when it failed, timed out, tried to write, or exceeded the cap."""

    elapsed_ms: float
    """Time its read-only execution took."""

    @property
    def dup_ratio(self) -> float | None:
        """``(rows - unique_rows) / rows``; None when it failed or returned nothing."""
        if not self.rows or self.unique_rows is None:
            return None
        return (self.rows - self.unique_rows) / self.rows

    def healthy(self, tau_inject: float) -> bool:
        """What the probe would not flag: executed, non-empty, ``dup_ratio < tau_inject``."""
        ratio = self.dup_ratio
        return self.error is None and ratio is not None and ratio < tau_inject

    def describe(self, show_dup_ratio: bool = False) -> str:
        """The short execution preview of the paper's prompt: first rows, ``EMPTY`` or ``ERROR``."""
        if self.error is not None:
            return f"ERROR: {self.error}"[:PREVIEW_CHARS]
        if not self.rows:
            return "EMPTY"
        text = ", ".join(repr(tuple(row)) if isinstance(row, Sequence) else repr(row) for row in self.first_rows)
        text = text[:PREVIEW_CHARS]
        more = f" ... ({self.rows} rows)" if self.rows > len(self.first_rows) else ""
        ratio = f" [rows={self.rows}, dup_ratio={self.dup_ratio:.2f}]" if show_dup_ratio else ""
        return f"{text}{more}{ratio}"


@dataclass(frozen=True)
class RescueRequest:
    """Everything a rescuer may look at for one flagged statement."""

    selected: CandidatePreview
    """The selected SQL (``index == -1``) and what it returned."""

    trigger: str
    """Why the probe flagged it: ``exec_error``, ``empty_result`` or ``cartesian_explosion``."""

    candidates: tuple[CandidatePreview, ...]
    """The caller's candidates, each executed read-only."""

    question: str | None
    """The natural-language question, when the caller gave one."""

    hint: str | None
    """Evidence or hint text (BIRD's ``evidence``), when given."""

    schema_summary: str
    """Tables and their columns, at most 1,500 characters."""

    tau_inject: float
    """The policy's explosion threshold, for rescuers that judge health."""


@dataclass(frozen=True)
class RescueChoice:
    """A rescuer's answer with its usage; plain rescuers may return just the index or None."""

    index: int | None
    """Chosen candidate, or None to keep the selection."""

    reason: str | None = None
    """Why no candidate was chosen (the fallback reason), or a note on the choice."""

    answer: str | None = None
    """The model's raw answer, for LLM rescuers."""

    prompt_tokens: int | None = None
    """Tokens the call's prompt used, as the provider reported them; None if not reported."""

    completion_tokens: int | None = None
    """Tokens the answer used; None if not reported."""

    cost_usd: float | None = None
    """Cost of the call in US dollars; None when the price is unknown (never guessed)."""


@dataclass(frozen=True)
class RescueReport:
    """What a rescue did for one statement (``GuardReport.rescue``)."""

    rescuer: str
    """Which rescuer ran, e.g. ``"DupRatioSelector"`` or ``"LLMRescue(openai/qwen3-coder)"``."""

    trigger: str
    """The probe verdict that started the rescue."""

    chosen_index: int | None
    """Index of the candidate now serving the cursor's rows; None when the selection was kept."""

    chosen_sql: str | None
    """That candidate's SQL; None when the selection was kept."""

    fallback_reason: str | None
    """Why the selection was kept (no healthy candidate, unparseable answer, timeout, ...); None when
    a candidate was chosen."""

    answer: str | None
    """The model's raw answer, for LLM rescuers."""

    latency_ms: float
    """Whole rescue: running the candidates plus the judge."""

    candidates_ms: float
    """Running and previewing the candidates."""

    judge_ms: float
    """The rescuer's own time (the LLM call, for ``LLMRescue``)."""

    prompt_tokens: int | None
    """Prompt tokens of the judge's call; None for rescuers without a model or when not reported."""

    completion_tokens: int | None
    """Answer tokens of the judge's call; None likewise."""

    cost_usd: float | None
    """Cost in US dollars from litellm's price map or the user's per-token prices; None if unknown."""

    candidates: tuple[CandidatePreview, ...] = field(repr=False)
    """The previews the rescuer saw."""


Rescuer = Callable[[RescueRequest], int | RescueChoice | None]


def rescuer_name(rescuer: Rescuer) -> str:
    describe = getattr(rescuer, "describe", None)
    if callable(describe):
        return str(describe())
    return getattr(rescuer, "__qualname__", None) or type(rescuer).__name__


@dataclass(frozen=True)
class DupRatioSelector:
    """Zero-cost rescue: the healthy candidate with the lowest dup_ratio, else keep the selection.

    Ties go to the earlier candidate, so upstream ranking still counts.
    """

    def __call__(self, request: RescueRequest) -> RescueChoice:
        healthy = [c for c in request.candidates if c.healthy(request.tau_inject)]
        if not healthy:
            return RescueChoice(None, reason="no healthy candidate (all failed, empty, or exploded)")
        best = min(healthy, key=lambda c: (c.dup_ratio, c.index))
        return RescueChoice(best.index, reason=f"lowest dup_ratio among {len(healthy)} healthy candidates")

    def describe(self) -> str:
        return "DupRatioSelector"


PAPER_PROMPT = (
    "You are selecting the best SQL from candidate solutions for a BIRD benchmark question. "
    "Question: {question} Hint: {hint} Schema (relevant tables/columns): {schema_summary} "
    "The currently selected SQL has a physical issue ({trigger_reason}): {base_sql} Result: {base_preview} "
    "Here are {count} alternative candidates with their execution results: {cand_text} "
    "Pick the candidate that best answers the question. "
    "Respond with ONLY the candidate number (0-{last}), nothing else. Your answer:"
)
"""Appendix C of the paper, with the candidate count filled in instead of a fixed 12."""

DUP_RATIO_ADVICE = (
    " Each result also shows its row count and duplication ratio (the share of rows that repeat another"
    " row); a high ratio often means a join that multiplies rows, so prefer candidates without"
    " unexplained duplicates."
)
"""Added by ``LLMRescue(show_dup_ratio=True)``: the paper's proposed extension."""


def build_prompt(request: RescueRequest, show_dup_ratio: bool = False, template: str = PAPER_PROMPT) -> str:
    """The judge prompt for ``request``; SQL cut to 600 characters, schema to 1,500."""
    cand_text = " ".join(
        f"[{c.index}] SQL: {c.sql[:SQL_CHARS]} Result: {c.describe(show_dup_ratio)}" for c in request.candidates
    )
    prompt = template.format(
        question=request.question or "(not given)",
        hint=request.hint or "(none)",
        schema_summary=request.schema_summary[:SCHEMA_CHARS],
        trigger_reason=request.trigger,
        base_sql=request.selected.sql[:SQL_CHARS],
        base_preview=request.selected.describe(show_dup_ratio),
        count=len(request.candidates),
        last=len(request.candidates) - 1,
        cand_text=cand_text,
    )
    if show_dup_ratio:
        prompt = prompt.replace(" Pick the candidate", DUP_RATIO_ADVICE + " Pick the candidate", 1)
    return prompt


_INTEGER = re.compile(r"-?\d+")


def parse_answer(answer: str | None, count: int) -> tuple[int | None, str | None]:
    """The first integer in the answer if it indexes a candidate, else (None, why)."""
    if not answer or not answer.strip():
        return None, "empty answer"
    match = _INTEGER.search(answer)
    if match is None:
        return None, f"no integer in the answer {answer.strip()[:80]!r}"
    index = int(match.group())
    if not 0 <= index < count:
        return None, f"answer {index} is out of range 0-{count - 1}"
    return index, None


@dataclass(frozen=True)
class LLMRescue:
    """The paper's LLM judge, called through litellm.

    ``model``/``api_base``/``api_key``/``timeout`` go to ``litellm.completion`` with temperature 0 and
    ``max_tokens=64``; ``completion_kwargs`` adds anything else (``mock_response`` for tests, headers).
    Cost comes from ``input_cost_per_token``/``output_cost_per_token`` when given, else from litellm's
    bundled price map, else None.
    """

    model: str
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 10.0
    show_dup_ratio: bool = False
    input_cost_per_token: float | None = None
    output_cost_per_token: float | None = None
    prompt_template: str = field(default=PAPER_PROMPT, repr=False)
    completion_kwargs: Mapping[str, Any] = field(default_factory=dict, repr=False, hash=False)

    def describe(self) -> str:
        return f"LLMRescue({self.model})"

    def __call__(self, request: RescueRequest) -> RescueChoice:
        prompt = build_prompt(request, self.show_dup_ratio, self.prompt_template)
        try:
            litellm = _import_litellm()
            response = _within_wall_clock(
                self.timeout,
                lambda: litellm.completion(
                    model=self.model,
                    messages=[{"role": "user", "content": prompt}],
                    temperature=0.0,
                    max_tokens=64,
                    api_base=self.api_base,
                    api_key=self.api_key,
                    timeout=self.timeout,
                    num_retries=0,
                    **dict(self.completion_kwargs),
                ),
            )
        except Exception as error:  # timeouts, refused connections, provider errors: keep the selection
            return RescueChoice(None, reason=f"LLM call failed: {type(error).__name__}: {_first_line(error)}")
        answer = _answer_text(response)
        prompt_tokens, completion_tokens = _usage(response)
        index, why = parse_answer(answer, len(request.candidates))
        return RescueChoice(
            index,
            reason=why,
            answer=answer,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=self._cost(response, prompt_tokens, completion_tokens),
        )

    def _cost(self, response: Any, prompt_tokens: int | None, completion_tokens: int | None) -> float | None:
        if self.input_cost_per_token is not None and self.output_cost_per_token is not None:
            if prompt_tokens is None or completion_tokens is None:
                return None
            return prompt_tokens * self.input_cost_per_token + completion_tokens * self.output_cost_per_token
        try:
            cost = _import_litellm().completion_cost(completion_response=response)
        except Exception:  # litellm raises for models it has no price for
            return None
        return float(cost) if cost else None


class LLMTimeout(TimeoutError):
    """The LLM gave no complete answer within ``LLMRescue.timeout`` seconds of wall-clock time."""


def _within_wall_clock(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()``, given up after ``seconds`` whatever the server does.

    An HTTP client's timeout bounds each read, not the whole answer: a server that trickles a byte at a
    time keeps it waiting indefinitely. The call runs on a daemon thread that is abandoned (its
    answer dropped) when the time is up; the caller carries on at once.
    """
    outcome: list[Any] = []

    def run() -> None:
        try:
            # litellm imports parts of itself lazily during the call, and those imports warn about its
            # own dependencies; a caller running with warnings as errors must still get an answer.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outcome.append((True, call()))
        except BaseException as error:
            outcome.append((False, error))

    worker = threading.Thread(target=run, name="guarded-sqlite-llm", daemon=True)
    worker.start()
    worker.join(seconds)
    if not outcome:
        raise LLMTimeout(f"no complete answer within {seconds:g} s")
    succeeded, value = outcome[0]
    if not succeeded:
        raise value
    return value


def _import_litellm() -> Any:
    # litellm would otherwise fetch its price map from the network at import time.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # Its import warns about its own dependencies; a caller running with warnings as errors must still
    # get a rescue.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import litellm

    litellm.suppress_debug_info = True
    return litellm


def _answer_text(response: Any) -> str | None:
    try:
        content = response.choices[0].message.content
    except (AttributeError, IndexError, KeyError, TypeError):
        return None
    return content if isinstance(content, str) else None


def _usage(response: Any) -> tuple[int | None, int | None]:
    usage = getattr(response, "usage", None)
    if usage is None:
        return None, None
    return getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:200] if text else ""


def run_rescuer(rescuer: Rescuer, request: RescueRequest) -> tuple[RescueChoice, float]:
    """Call any rescuer, normalise its answer, and time it; a rescuer that raises keeps the selection."""
    started = time.perf_counter()
    try:
        raw = rescuer(request)
    except Exception as error:
        choice = RescueChoice(None, reason=f"rescuer raised {type(error).__name__}: {_first_line(error)}")
    else:
        if isinstance(raw, RescueChoice):
            choice = raw
        elif raw is None:
            choice = RescueChoice(None, reason="rescuer kept the selection")
        elif isinstance(raw, int) and not isinstance(raw, bool):
            choice = RescueChoice(raw)
        else:
            choice = RescueChoice(None, reason=f"rescuer returned {type(raw).__name__}, not an index")
        if choice.index is not None and not 0 <= choice.index < len(request.candidates):
            choice = RescueChoice(
                None,
                reason=f"index {choice.index} is out of range 0-{len(request.candidates) - 1}",
                answer=choice.answer,
                prompt_tokens=choice.prompt_tokens,
                completion_tokens=choice.completion_tokens,
                cost_usd=choice.cost_usd,
            )
    return choice, (time.perf_counter() - started) * 1000
