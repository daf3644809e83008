"""Harmon et al.'s measurement: answers sampled over seeds and extracted from the text."""

import numpy as np
import pandas as pd
import pytest
import torch

from forgetmap.correctness.extract import choose_extractor, extract, is_correct
from forgetmap.correctness.sampled import Question, judge, question_text
from forgetmap.errors import DataError
from forgetmap.generation import Answers, Sampling, generate_torch, sample_top_p


@pytest.mark.parametrize("text, k, expected", [
    ("Let me think. B is wrong, so the answer is (C).", 4, "C"),
    ("The answer is D", 4, "D"),
    ("Reasoning... Answer: A\nThen I said A again", 4, "A"),
    ("I pick (B) over (A)", 4, "A"),  # the last parenthesised letter
    ("It must be\nB.", 4, "B"),
    ("The answer is E", 4, None),  # E is not among 4 options
    ("A lovely day. I think so.", 2, None),  # an article, not a standalone answer letter
    ("", 4, None),
])
def test_a_letter_is_found_as_lighteval_and_lm_eval_find_it(text, k, expected):
    assert extract(text, "letter", k) == expected


@pytest.mark.parametrize("text, expected", [
    ("She has 3 apples and buys 4 more, so 7.", "7"),
    ("Total: $1,234.", "1234"),
    ("First 12, then #### 18\nlater 99", "18"),  # GSM8K's strict answer wins
    ("no number here", None),
])
def test_a_number_is_found_as_lm_eval_gsm8k_finds_it(text, expected):
    assert extract(text, "number") == expected


def test_answers_are_judged_by_their_kind():
    assert is_correct("1234", "1,234", "number") and is_correct("18.0", "18", "number")
    assert is_correct("72", "She sold 48 + 24 = 72 clips.\n#### 72", "number")  # GSM8K's gold solution
    assert choose_extractor("auto", 0, "48 + 24 = 72\n#### 72") == "number"
    assert not is_correct(None, "B", "letter") and is_correct("B", "B", "letter")
    assert extract("Final: Paris!\n\nmore", "regex", pattern=r"Final: (\w+)") == "Paris"
    assert is_correct("the Paris", "paris", "regex")
    assert extract("Paris\n\nblah", "exact", stop=["\n\n"]) == "Paris"
    assert choose_extractor("auto", 4, "B") == "letter" and choose_extractor("auto", 0, "42") == "number"
    assert choose_extractor("auto", 0, "Paris") == "exact" and choose_extractor("regex", 4, "B") == "regex"


def test_a_multiple_choice_question_letters_its_options():
    text = question_text("Question: Which colour?\nAnswer:", ["red", "blue"])
    assert text == "Question: Which colour?\nA. red\nB. blue\nAnswer:"
    assert question_text("What is 2 + 2?", None) == "What is 2 + 2?"


def question(source="arc", extractor="letter", pattern=None):
    return Question(np.zeros(1, np.int64), "B", 4, source, extractor, pattern)


def seeds(*texts, lengths=None, capped=None) -> list[Answers]:
    """Each seed's answers as generation gives them (texts per item; tokens only counted)."""
    out = []
    for s, seed_texts in enumerate(texts):
        counts = lengths[s] if lengths else [1] * len(seed_texts)
        cut = capped[s] if capped else [False] * len(seed_texts)
        out.append(Answers([np.zeros(n, np.int64) for n in counts], list(seed_texts), np.asarray(cut)))
    return out


def test_judge_keeps_every_seed_and_pairs_nothing_yet():
    record = judge([question(), question()], seeds(["answer is B", "no idea"], ["(A)", "B."],
                                                   lengths=[[2, 3], [3, 4]], capped=[[False, True], [False, False]]),
                   {"stop": [], "max_new_tokens": 4})
    assert record["answers"].tolist() == [["B", "A"], [None, "B"]]
    assert record["correct_seeds"].tolist() == [[1, 0], [0, 1]] and record["correct"].tolist() == [1, 0]
    assert record["predicted"].tolist() == ["B", ""] and record["n_generated"].tolist() == [5, 7]
    assert record["n_capped"].tolist() == [0, 1]


def test_every_extractor_reads_the_text_before_the_first_stop_string():
    """A DPO stage that goes on after its answer ('Answer: 73' then a new question) is read as 73, and a
    letter written twice across a stop string is read as the first."""
    gsm = Question(np.zeros(1, np.int64), "73", 0, "gsm", "number", None)
    record = judge([gsm, question()], seeds(["Answer: 73\n\nWhat is 34 + 28?\n", "Answer: B\n\nAnswer: C"]),
                   {"stop": ["\n\n"], "max_new_tokens": 32})
    assert record["answers"].tolist() == [["73"], ["B"]] and record["correct"].tolist() == [1, 1]
    assert record["generations"].tolist() == [["Answer: 73"], ["Answer: B"]]


def test_a_pattern_that_matches_nothing_fails_naming_the_source_and_an_answer(caplog):
    settings = {"stop": [], "max_new_tokens": 4}
    with pytest.raises(DataError, match=r"config key upstream.NAME.answers.pattern: source 'gsm': the pattern 'ZZ\(\\\\d\+\)' "
                                        r"matched none of 2 generated answers; one of them: 'It is 4'"):
        judge([question("gsm", "regex", r"ZZ(\d+)")], seeds(["It is 4"], ["It is 5"]), settings)
    judge([question("arc")], seeds(["no letter"], ["nothing"], capped=[[True], [True]]), settings)  # a warning
    assert "source 'arc': no letter answer could be extracted from 100% of 2 generated answers" in caplog.text
    assert "source 'arc': 100% of 2 answers ran to their budget (max_new_tokens 4" in caplog.text


def test_nucleus_sampling_is_seeded_and_keeps_only_the_top_mass():
    logits = torch.tensor([[4.0, 3.9, -5.0, -6.0]] * 2000)
    draws = sample_top_p(logits, 1.0, 0.9, torch.Generator().manual_seed(0))
    assert set(draws.tolist()) == {0, 1}  # the tail beyond 90 % of the mass is never drawn
    again = sample_top_p(logits, 1.0, 0.9, torch.Generator().manual_seed(0))
    assert torch.equal(draws, again)
    assert set(sample_top_p(logits, 1.0, 1e-6, torch.Generator().manual_seed(1)).tolist()) == {0}  # greedy


def test_sampled_generation_repeats_by_seed_and_varies_across_seeds():
    from helpers import tiny_model, tiny_tokenizer

    torch.set_num_threads(1)
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    contexts = [np.asarray(tok("12 + 5 =")["input_ids"]), np.asarray(tok("the city")["input_ids"])]
    limits = np.array([8, 8])

    def generated(sampling, seed=0):
        return generate_torch(model, tok, contexts, limits, sampling, seed, 512).tokens

    first, again = generated(Sampling(1.0, 1.0), 3), generated(Sampling(1.0, 1.0), 3)
    other = generated(Sampling(1.0, 1.0), 4)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert any(not np.array_equal(a, b) for a, b in zip(first, other))
    greedy = generated(Sampling())
    assert all(np.array_equal(a, b) for a, b in zip(greedy, generated(Sampling(1.0, 1e-9), 5)))


def test_few_shot_questions_carry_solved_items_of_their_source():
    from forgetmap.correctness.sampled import encode_questions
    from helpers import tiny_tokenizer

    tok = tiny_tokenizer()
    frame = pd.DataFrame({"example_id": [f"q{i}" for i in range(4)], "source": ["a", "a", "a", "b"],
                          "kind": ["lm"] * 4, "prompt": [f"Question {i}?\nAnswer:" for i in range(4)],
                          "choices": [["x", "y"]] * 4, "answer": ["y", "x", "y", "x"]})
    settings = {"chat_template": "olmo", "target_delimiter": " ", "max_length": 256, "max_new_tokens": 4,
                "shots": 2, "extraction": {"extract": "auto"}}
    rows, questions = encode_questions(tok, frame, settings)
    text = tok.decode(questions[0].context, skip_special_tokens=True)
    assert text.count("Answer:") == 3 and "Question 3" not in text and "Question 0?\nA. x\nB. y\nAnswer:" in text
    assert {"Question 1?\nA. x\nB. y\nAnswer: A", "Question 2?\nA. x\nB. y\nAnswer: B"} <= set(text.split("\n\n"))
    assert [q.gold for q in questions] == ["B", "A", "B", "A"] and questions[0].extractor == "letter"
    lone = tok.decode(questions[3].context, skip_special_tokens=True)
    assert lone.count("Answer:") == 1  # source b has no other item to show


def test_a_choice_is_the_option_the_text_names():
    options = ("Quarry Hill", "Tolford", "Ravensby")
    assert extract("Tolford\nmore", "choice", 3, stop=["\n"], options=options) == "Tolford"
    assert extract("I think it is the quarry hill.", "choice", 3, options=options) == "Quarry Hill"
    assert extract("Ravensby or maybe Tolford", "choice", 3, options=options) == "Tolford"  # the last named
    assert extract("nowhere", "choice", 3, options=options) is None
    assert choose_extractor("choice", 0, "tunlaw") == "exact" and is_correct("Tolford", "Tolford", "choice")
