"""Token spans: chat responses start at the exact token after the assistant marker."""

import pandas as pd
import pytest

from forgetmap.data.chat import encode_chat, encode_examples, encode_lm
from helpers import tiny_tokenizer


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def test_chat_span_is_the_response_without_the_closing_eos(tok):
    [e] = encode_chat(tok, ["What is 2 plus 3?"], ["5 exactly"], "olmo", 128)
    text = tok.decode(e.ids)
    assert text.startswith("<|endoftext|><|user|>\nWhat is 2 plus 3?\n<|assistant|>\n")
    assert tok.decode(e.ids[e.target_start:e.score_end]) == "5 exactly"
    assert e.ids[-1] == tok.eos_token_id and e.score_end == len(e.ids) - 1
    assert tok.convert_ids_to_tokens(int(e.ids[e.target_start - 1])) != "<|user|>"


def test_lm_span_is_every_token_but_the_first(tok):
    [e] = encode_lm(tok, ["Kavo lives in Darluton."], 128)
    assert e.target_start == 1 and e.score_end == len(e.ids) and e.n_scored == len(e.ids) - 1


def test_long_chat_keeps_its_tail_and_long_text_its_head(tok):
    [full] = encode_chat(tok, ["word " * 40], ["the answer"], "olmo", 256)
    [cut] = encode_chat(tok, ["word " * 40], ["the answer"], "olmo", 12)
    assert len(cut.ids) == 12 and list(cut.ids) == list(full.ids[-12:])
    assert tok.decode(cut.ids[cut.target_start:cut.score_end]) == "the answer"
    [lm] = encode_lm(tok, ["one two three four five six seven eight nine ten"], 5)
    assert len(lm.ids) == 5


def test_examples_keep_their_row_order(tok):
    frame = pd.DataFrame({"kind": ["chat", "lm", "chat"], "text": [None, "a b c", None],
                          "prompt": ["p1", None, "p2"], "response": ["r1", None, "r2"]})
    enc = encode_examples(tok, frame, "olmo", 64)
    assert tok.decode(enc[0].ids[enc[0].target_start:enc[0].score_end]) == "r1"
    assert tok.decode(enc[1].ids) == "a b c"
    assert tok.decode(enc[2].ids[enc[2].target_start:enc[2].score_end]) == "r2"
