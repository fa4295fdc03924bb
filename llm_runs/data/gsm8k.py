"""GSM8K: a loader from a local JSONL file or a local `datasets` cache, ``#### N`` answer
extraction, and ``math-verify`` checking. Nothing here downloads: a missing path is a clear
``ValueError``.

GSM8K rows are ``{"question": str, "answer": str}`` where the answer's last line is
``#### <number>``. :func:`write_sample` writes a small file in exactly that format, generated
from templates, so the loader and checker are tested on data the project ships itself.
"""
from __future__ import annotations

import json
import random
import re
import threading
from dataclasses import dataclass
from pathlib import Path

_FINAL_RE = re.compile(r"####\s*(.+?)\s*$", re.MULTILINE)
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True)
class Problem:
    question: str
    answer: str  # the full worked answer
    final: str  # the number after "####", normalised (no commas, no $)


def extract_final_answer(answer: str) -> str:
    """The number after ``####`` in a GSM8K answer, without thousands separators or units.

    >>> extract_final_answer("She has 3 + 4 = 7 apples.\\n#### 1,007")
    '1007'
    """
    m = _FINAL_RE.search(answer)
    if not m:
        raise ValueError(f"no '#### N' final answer in {answer[-80:]!r}")
    raw = m.group(1).replace(",", "").replace("$", "").strip()
    num = _NUMBER_RE.search(raw)
    if not num:
        raise ValueError(f"final answer {m.group(1)!r} is not a number")
    return num.group(0)


def check_answer(completion: str, gold: str) -> bool:
    """True when the completion's answer equals ``gold`` (a number), checked by math-verify.

    The completion's answer is its ``#### N`` line if it has one, else a ``\\boxed{}``
    expression or its last number (math-verify's own extraction).
    """
    try:
        from math_verify import parse, verify
    except ImportError as exc:  # pragma: no cover - math-verify is in the [gsm8k] extra
        raise ImportError("GSM8K checking needs math-verify: pip install 'gmc-grpo-toolkit[gsm8k]'") from exc
    # math-verify's timeouts use signal.alarm, which only the main thread may call: elsewhere
    # (a rollout thread) parse and verify run without a timeout rather than raise.
    limit = 5 if threading.current_thread() is threading.main_thread() else None
    m = _FINAL_RE.search(completion)
    text = m.group(1).replace(",", "") if m else completion
    pred = parse(text, parsing_timeout=limit)
    if not pred:
        nums = _NUMBER_RE.findall(completion.replace(",", ""))
        pred = parse(nums[-1], parsing_timeout=limit) if nums else []
    return bool(pred) and bool(verify(parse(gold, parsing_timeout=limit), pred, timeout_seconds=limit))


def _rows_to_problems(rows, source: str) -> list[Problem]:
    out = []
    for i, row in enumerate(rows):
        if "question" not in row or "answer" not in row:
            raise ValueError(f"{source}: row {i} lacks 'question' or 'answer' (keys: {sorted(row)})")
        out.append(Problem(row["question"], row["answer"], extract_final_answer(row["answer"])))
    if not out:
        raise ValueError(f"{source}: no rows")
    return out


def load(path: str | Path, split: str = "train") -> list[Problem]:
    """Load GSM8K from a local JSONL file, a folder of JSONL files (``<split>.jsonl``), or a
    local `datasets` cache (a folder written by ``Dataset.save_to_disk`` /
    ``DatasetDict.save_to_disk``). Never downloads."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"GSM8K path {str(p)!r} does not exist (this toolkit never downloads data)")
    if p.is_file():
        with open(p) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        return _rows_to_problems(rows, str(p))
    if (p / f"{split}.jsonl").exists():
        return load(p / f"{split}.jsonl")
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover
        raise ValueError(f"{p} is a folder without {split}.jsonl and `datasets` is not installed") from exc
    try:
        ds = datasets.load_from_disk(str(p))
    except (FileNotFoundError, ValueError) as exc:
        raise ValueError(f"{p}: neither {split}.jsonl nor a `datasets` folder saved with save_to_disk ({exc})") from exc
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise ValueError(f"{p}: no split {split!r}; splits: {sorted(ds)}")
        ds = ds[split]
    return _rows_to_problems(ds, str(p))


_TEMPLATES = [
    ("{name} has {a} apples and buys {b} more. Then {name} gives away {c}. How many apples does {name} have now?",
     lambda a, b, c: a + b - c, "{name} has {a} + {b} = {ab} apples, then {ab} - {c} = {r}."),
    ("A box holds {a} pencils. {name} fills {b} boxes and loses {c} pencils. How many pencils are left?",
     lambda a, b, c: a * b - c, "{b} boxes hold {a} * {b} = {ab} pencils; {ab} - {c} = {r}."),
    ("{name} reads {a} pages a day for {b} days, then {c} more pages. How many pages in total?",
     lambda a, b, c: a * b + c, "{a} * {b} = {ab} pages, plus {c} is {r}."),
]
_NAMES = ["Ava", "Ben", "Chen", "Dana", "Eli", "Fatima", "Goro", "Hana"]


def write_sample(path: str | Path, n: int = 50, seed: int = 0, overwrite: bool = False) -> Path:
    """Write ``n`` templated GSM8K-format rows (question / worked answer / ``#### N``) to ``path``."""
    p = Path(path)
    if p.exists() and not overwrite:
        raise ValueError(f"{p} exists; pass overwrite=True to replace it")
    rng = random.Random(seed)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "w") as f:
        for _ in range(n):
            q, fn, work = rng.choice(_TEMPLATES)
            a, b = rng.randint(2, 40), rng.randint(2, 12)
            c = rng.randint(1, a)
            ab = a * b if "*" in work else a + b
            r = fn(a, b, c)
            name = rng.choice(_NAMES)
            answer = work.format(name=name, a=a, b=b, c=c, ab=ab, r=r) + f"\n#### {r:,}"
            f.write(json.dumps({"question": q.format(name=name, a=a, b=b, c=c), "answer": answer}) + "\n")
    return p
