"""Tasks with a verifiable reward r(q, o) in {0, 1} (THEORY §1, A1 with R_max = 1).

A task is a training pool and a held-out split of :class:`Problem` (prompt text, answer
text) plus a reward on the decoded completion. Tasks are registered by name
(:func:`register_task`): ``arithmetic``, ``scratchpad`` (sums worked out step by step, with a
horizon knob), ``scratchpad_answer`` (the same, the final number alone rewarded) and ``gsm8k``.

>>> t = ArithmeticTask(digits=1, terms=2, heldout_size=20, seed=0)
>>> len(t.train), len(t.heldout), t.reward(t.train[0], t.train[0].answer, finished=True)
(80, 20, 1.0)
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from schema.results import scratchpad_horizon, sum_width

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
        self.max_answer_tokens = sum_width(digits, terms)

    def _problem(self, code: int, base: int) -> Problem:
        ops = []
        for _ in range(self.terms):
            code, x = divmod(code, base)
            ops.append(x)
        return Problem("+".join(map(str, ops)) + "=", str(sum(ops)))

    def reward(self, problem: Problem, completion: str, finished: bool) -> float:
        """1 if the completion (text before EOS) is exactly the answer and EOS was emitted."""
        return float(finished and completion.strip() == problem.answer)


class ScratchpadTask:
    """Sums of ``terms`` operands worked out step by step: the completion writes every partial sum.

    ``3+5+9+2=`` is answered ``08,17,19`` then EOS: the running totals after the second, third,
    ... operand, each zero-padded to the width W of the largest possible sum and separated by
    commas, the last one being the answer. Every completion therefore has exactly
    ``H = (terms - 1) (W + 1)`` tokens, EOS included (:attr:`horizon`): ``terms`` is the horizon
    knob (one-digit operands: H = 3 (terms - 1), so 7 terms give H = 18).

    The reward is one terminal reward per completion (no per-step reward): with
    ``check="worked"`` (task ``scratchpad``) it is 1 iff EOS was emitted and the completion is
    the worked solution, so the correct completion is unique and the evaluation's teacher-forced
    ``pc`` is exactly P(r = 1). With ``check="answer"`` (task ``scratchpad_answer``) only the
    number after the last comma is compared with the answer (a completion of the right format,
    any partial sums); ``pc`` (the probability of the worked solution) is then a lower bound on
    P(r = 1). Splits as :class:`ArithmeticTask` (held-out problems disjoint from training).

    >>> t = ScratchpadTask(terms=4, heldout_size=5, seed=0)
    >>> t.horizon, len(t.train[0].answer) + 1 == t.horizon
    (9, True)
    >>> ScratchpadTask.worked([3, 5, 9, 2], width=2)
    '08,17,19'
    """

    alphabet = "0123456789+=,"
    CHECKS = ("worked", "answer")

    def __init__(self, digits: int = 1, terms: int = 7, heldout_size: int = 200, train_size: int | None = None,
                 seed: int = 0, check: str = "worked"):
        if check not in self.CHECKS:
            raise ValueError(f"unknown scratchpad check {check!r}; valid: {', '.join(self.CHECKS)}")
        self.check = check
        self.name = "scratchpad" if check == "worked" else "scratchpad_answer"
        base = ArithmeticTask(digits, terms, heldout_size, train_size, seed)  # the same problems, splits and checks
        self.digits, self.terms = digits, terms
        self.width = sum_width(digits, terms)
        self.train = [self._problem(p) for p in base.train]
        self.heldout = [self._problem(p) for p in base.heldout]
        self.horizon = scratchpad_horizon(digits, terms)
        self.max_answer_tokens = self.horizon - 1

    @staticmethod
    def worked(operands: list[int], width: int) -> str:
        """The worked solution: running totals after each operand from the second on."""
        total, sums = operands[0], []
        for x in operands[1:]:
            total += x
            sums.append(f"{total:0{width}d}")
        return ",".join(sums)

    def _problem(self, p: Problem) -> Problem:
        ops = [int(x) for x in p.prompt[:-1].split("+")]
        return Problem(p.prompt, self.worked(ops, self.width))

    def reward(self, problem: Problem, completion: str, finished: bool) -> float:
        """1 if EOS was emitted and the completion is the worked solution (``check="worked"``), or
        has the worked format (terms - 1 fields of W digits) with the right last field (``"answer"``)."""
        if not finished:
            return 0.0
        if self.check == "worked":
            return float(completion == problem.answer)
        fields = completion.split(",")
        ok = len(fields) == self.terms - 1 and all(len(f) == self.width and f.isdigit() for f in fields)
        return float(ok and fields[-1] == problem.answer.rsplit(",", 1)[-1])


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


@register_task("scratchpad")
def _scratchpad(config) -> ScratchpadTask:
    return ScratchpadTask(config.digits, config.terms, config.heldout_size, config.train_size, config.task_seed)


@register_task("scratchpad_answer")
def _scratchpad_answer(config) -> ScratchpadTask:
    return ScratchpadTask(config.digits, config.terms, config.heldout_size, config.train_size, config.task_seed,
                          check="answer")


# --------------------------------------------------------------------------- GSM8K


class GSM8KTask:
    """Grade-school math word problems (GSM8K format) with a math-verify reward.

    The training pool is the ``train`` split of ``path`` (:func:`llm_runs.data.gsm8k.load`).
    The held-out split is ``heldout_size`` problems of the ``test`` split when ``path`` is a
    folder that has one (``test.jsonl`` or a saved ``DatasetDict`` with a ``test`` split),
    otherwise ``heldout_size`` problems taken out of the pool before training; either way a
    permutation seeded by ``seed`` picks them. ``prompt`` is a template in which
    ``{question}`` is replaced by the problem text. A problem's ``answer`` is the gold final
    number, so the evaluation's ``pc`` is the probability of the bare answer then EOS (a lower
    bound on P(correct), not a useful score for a model that reasons first).
    """

    name = "gsm8k"
    alphabet = None
    max_answer_tokens = 255  # completion budget in tokens (EOS excluded): worked solutions, not bare numbers

    def __init__(self, path, prompt: str = "Question: {question}\nAnswer:", heldout_size: int = 200,
                 train_size: int | None = None, seed: int = 0):
        from .data import gsm8k

        if "{question}" not in prompt:
            raise ValueError(f"gsm8k prompt template must contain '{{question}}', got {prompt!r}")
        if heldout_size < 1:
            raise ValueError(f"heldout_size must be >= 1, got {heldout_size}")
        if train_size is not None and train_size < 1:
            raise ValueError(f"train_size must be None or >= 1, got {train_size}")
        self.path, self.prompt = str(path), prompt
        pool = gsm8k.load(path, "train")
        rng = np.random.default_rng([seed, 0x65A8])
        if Path(path).is_dir() and _has_split(Path(path), "test"):
            test = gsm8k.load(path, "test")
            if heldout_size > len(test):
                raise ValueError(f"heldout_size ({heldout_size}) exceeds the {len(test)} problems of {path}'s test "
                                 f"split")
            heldout = [test[i] for i in rng.permutation(len(test))[:heldout_size]]
        else:
            if heldout_size >= len(pool):
                raise ValueError(f"heldout_size ({heldout_size}) leaves no training problem among the {len(pool)} of "
                                 f"{path} (it has no test split)")
            order = rng.permutation(len(pool))
            heldout, pool = [pool[i] for i in order[:heldout_size]], [pool[i] for i in order[heldout_size:]]
        if train_size is not None:
            if train_size > len(pool):
                raise ValueError(f"train_size ({train_size}) exceeds the {len(pool)} training problems of {path}")
            pool = [pool[i] for i in rng.permutation(len(pool))[:train_size]]
        self.train = [self._problem(p) for p in pool]
        self.heldout = [self._problem(p) for p in heldout]

    def _problem(self, p) -> Problem:
        return Problem(self.prompt.replace("{question}", p.question), p.final)

    def reward(self, problem: Problem, completion: str, finished: bool) -> float:
        """1 if the completion ended (EOS) and its answer equals the gold number (math-verify);
        a completion cut off at the token budget scores 0 whatever its last number."""
        from .data.gsm8k import check_answer

        return float(finished and check_answer(completion, problem.answer))


def _has_split(folder: Path, split: str) -> bool:
    if (folder / f"{split}.jsonl").is_file():
        return True
    dd = folder / "dataset_dict.json"  # written by datasets.DatasetDict.save_to_disk
    return dd.is_file() and split in json.loads(dd.read_text()).get("splits", [])


@register_task("gsm8k")
def _gsm8k(config) -> GSM8KTask:
    if not config.gsm8k_path:
        raise ValueError("task 'gsm8k' needs --gsm8k-path: a local GSM8K JSONL file, a folder of <split>.jsonl files "
                         "or a datasets save_to_disk folder (nothing is downloaded)")
    if config.warm_start_steps:
        raise ValueError(f"task 'gsm8k' has no supervised warm start (warm_start_steps = {config.warm_start_steps}): "
                         "set --warm-start-steps 0 and start from a checkpoint (--preset qwen3-0.6b --model-path DIR)")
    return GSM8KTask(config.gsm8k_path, config.gsm8k_prompt, config.heldout_size, config.train_size, config.task_seed)
