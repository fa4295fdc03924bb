"""GSM8K loader and checker on a file the project writes itself."""
import json
from pathlib import Path

import pytest

from llm_runs.data import gsm8k


@pytest.fixture()
def sample(tmp_path):
    return gsm8k.write_sample(tmp_path / "train.jsonl", n=20, seed=3)


def test_round_trip_and_final_answers(sample):
    probs = gsm8k.load(sample)
    assert len(probs) == 20
    for p, line in zip(probs, Path(sample).read_text().splitlines()):
        row = json.loads(line)
        assert p.question == row["question"]
        assert p.final == row["answer"].rsplit("####", 1)[1].strip().replace(",", "")
        assert gsm8k.check_answer(f"Working...\n#### {p.final}", p.final)
        assert not gsm8k.check_answer(f"#### {int(p.final) + 1}", p.final)
    assert gsm8k.load(sample.parent, split="train") == probs


def test_extraction_and_checking():
    assert gsm8k.extract_final_answer("x\n#### 1,234") == "1234"
    assert gsm8k.extract_final_answer("#### $18") == "18"
    with pytest.raises(ValueError, match="no '#### N'"):
        gsm8k.extract_final_answer("the answer is 4")
    assert gsm8k.check_answer(r"so \boxed{42}", "42")
    assert gsm8k.check_answer("she pays 40 then 42", "42")  # last number
    assert gsm8k.check_answer("#### 1,072", "1072")
    assert not gsm8k.check_answer("no number here", "42")


def test_datasets_cache_folder(tmp_path, sample):
    import datasets

    rows = [json.loads(line) for line in Path(sample).read_text().splitlines()]
    dd = datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})
    dd.save_to_disk(str(tmp_path / "cache"))
    probs = gsm8k.load(tmp_path / "cache", split="test")
    assert [p.final for p in probs] == [p.final for p in gsm8k.load(sample)]
    with pytest.raises(ValueError, match="no split 'train'"):
        gsm8k.load(tmp_path / "cache", split="train")


def test_missing_path_and_bad_rows(tmp_path):
    with pytest.raises(ValueError, match="does not exist.*never downloads"):
        gsm8k.load(tmp_path / "nope.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"q": "x"}) + "\n")
    with pytest.raises(ValueError, match="row 0 lacks 'question'"):
        gsm8k.load(bad)
    with pytest.raises(ValueError, match="exists"):
        gsm8k.write_sample(bad)
