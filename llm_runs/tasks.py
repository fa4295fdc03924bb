"""Tasks with a verifiable reward r(q, o) in {0, 1} (THEORY §1, A1 with R_max = 1).

A task is a training pool and a held-out split of :class:`Problem` (prompt text, answer
text) plus a reward on the decoded completion. Tasks are registered by name
(:func:`register_task`); issue 6 adds GSM8K beside ``arithmetic``.

>>> t = ArithmeticTask(digits=1, terms=2, heldout_size=20, seed=0)
>>> len(t.train), len(t.heldout), t.reward(t.train[0], t.train[0].answer, finished=True)
(80, 20, 1.0)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .registry import Registry

_MAX_ENUMERATE = 200_000
_DEFAULT_MAX_TRAIN = 100_000


@dataclass(frozen=True)
class Problem:
    prompt: str
    answer: str


class Task(Protocol):
    name: str
    train: list[Problem]
    heldout: list[Problem]
    alphabet: str | None  # characters of every prompt and answer (char tokenizers); None for free text
    max_answer_tokens: int  # suggested completion budget, EOS excluded, for a character-level tokenizer

    def reward(self, problem: Problem, completion: str, finished: bool) -> float: ...


class ArithmeticTask:
    """``a+b=`` style sums; the completion must be the exact integer, then EOS.

    Difficulty knobs: ``digits`` (operands 0 .. 10^digits - 1) and ``terms`` (operands per
    problem). The ``heldout_size`` problems of the held-out split are disjoint from the
    training pool. Problem sets of at most 200k are enumerated and permuted with ``seed``;
    larger ones are sampled without repetition.
    """

    name = "arithmetic"
    alphabet = "0123456789+="

    def __init__(self, digits: int = 1, terms: int = 2, heldout_size: int = 20, train_size: int | None = None,
                 seed: int = 0):
        if digits < 1:
            raise ValueError(f"digits must be >= 1, got {digits}")
        if terms < 2:
            raise ValueError(f"terms must be >= 2 (a sum needs two operands), got {terms}")
        if heldout_size < 1:
            raise ValueError(f"heldout_size must be >= 1, got {heldout_size}")
        if train_size is not None and train_size < 1:
            raise ValueError(f"train_size must be None or >= 1, got {train_size}")
        self.digits, self.terms = digits, terms
        base = 10**digits
        total = base**terms
        want_train = train_size if train_size is not None else min(total - heldout_size, _DEFAULT_MAX_TRAIN)
        if heldout_size + want_train > total:
            raise ValueError(
                f"heldout_size ({heldout_size}) + train_size ({want_train}) exceed the {total} distinct problems of "
                f"digits={digits}, terms={terms}")
        if want_train < 1:
            raise ValueError(f"no training problems left: {total} problems, heldout_size = {heldout_size}")
        rng = np.random.default_rng([seed, 0x7A5C])
        n = heldout_size + want_train
        if total <= _MAX_ENUMERATE:
            codes = rng.permutation(total)[:n]
        else:
            seen: dict[int, None] = {}
            while len(seen) < n:
                for c in rng.integers(0, total, size=2 * (n - len(seen))).tolist():
                    seen.setdefault(c, None)
            codes = np.array(list(seen)[:n])
        problems = [self._problem(int(c), base) for c in codes]
        self.heldout = problems[:heldout_size]
        self.train = problems[heldout_size:]
        self.max_answer_tokens = len(str((base - 1) * terms))

    def _problem(self, code: int, base: int) -> Problem:
        ops = []
        for _ in range(self.terms):
            code, x = divmod(code, base)
            ops.append(x)
        return Problem("+".join(map(str, ops)) + "=", str(sum(ops)))

    def reward(self, problem: Problem, completion: str, finished: bool) -> float:
        """1 if the completion (text before EOS) is exactly the answer and EOS was emitted."""
        return float(finished and completion.strip() == problem.answer)


# --------------------------------------------------------------------------- registry

TASKS = Registry("task")


def register_task(name: str):
    """Register ``factory(config) -> Task`` under ``name``; a taken name is refused."""
    return lambda factory: TASKS.register(name, factory)


get_task_factory = TASKS.lookup


def build_task(config) -> Task:
    return get_task_factory(config.task)(config)


@register_task("arithmetic")
def _arithmetic(config) -> ArithmeticTask:
    return ArithmeticTask(config.digits, config.terms, config.heldout_size, config.train_size, config.task_seed)
