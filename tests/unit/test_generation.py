"""How a row is asked and how its answers are written (Harmon et al.'s protocol): the prompt is the row's
whatever the item's kind, a generation ends at its stop strings, and a question is never cut to make room
for its answer. On a checkpoint chain of stand-ins that are not the demo's (a GPT-NeoX base without a chat
template, OLMo-2 and Llama post-trained rows with the Tulu template) over plain-text and chat items,
multiple choice and free form; answers are checked against plain transformers reading the same prompts."""

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from forgetmap.correctness import items as options_path
from forgetmap.correctness import sampled
from forgetmap.errors import DataError
from forgetmap.generation import Sampling, budgets, generate_torch, until_stop
from helpers import IdTokenizer
from standins import TULU_TEMPLATE, build_model, sentences, train_tokenizer

torch.set_num_threads(1)


def benchmark() -> pd.DataFrame:
    """lm multiple choice (mmlu), lm free form (gsm), chat free form (qa) and chat multiple choice (arc)."""
    texts = sentences(24, seed=11)
    rows = []
    for i, t in enumerate(texts[:6]):
        options = ["red", "green", "blue", "north"]
        rows.append({"example_id": f"mc-{i}", "source": "mmlu", "kind": "lm", "prompt": f"Question: {t}\nAnswer:",
                     "choices": options, "answer": options[i % 4]})
    for i, t in enumerate(texts[6:12]):
        rows.append({"example_id": f"gsm-{i}", "source": "gsm", "kind": "lm", "prompt": f"Question: {t}\nAnswer:",
                     "choices": None, "answer": str(i + 3)})
    for i, t in enumerate(texts[12:18]):
        rows.append({"example_id": f"qa-{i}", "source": "qa", "kind": "chat", "prompt": t, "response": "yes",
                     "choices": None, "answer": "yes"})
    for i, t in enumerate(texts[18:24]):
        rows.append({"example_id": f"arc-{i}", "source": "arc", "kind": "chat", "prompt": t, "response": "no",
                     "choices": ["yes", "no"], "answer": ["yes", "no"][i % 2]})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def chain():
    """The base (GPT-NeoX, no template) and two post-trained rows (OLMo-2 and Llama, the Tulu template)."""
    out = {}
    for name, architecture, template in (("base", "gpt_neox", None), ("sft", "olmo2", TULU_TEMPLATE),
                                         ("dpo", "llama", TULU_TEMPLATE)):
        tok = train_tokenizer(architecture, template)
        out[name] = (build_model(architecture, tok, seed=len(name)), tok)
    return out


def settings(**changes) -> dict:
    """A sampled measurement's settings, greedy (temperature 0) unless changed."""
    return {"chat_template": "tokenizer", "target_delimiter": " ", "max_new_tokens": 12, "stop": [],
            "temperature": 0.0, "top_p": 1.0, "seeds": 1, "seed": 0, "token_budget": 4096, "positions": 128,
            "extraction": {"extract": "auto"}, "metric": "acc", **changes}


def user_turn(tok, question: str) -> list[int]:
    """The prompt a chat model is asked as transformers renders it: the question as the user turn."""
    text = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True)
    return tok(text, add_special_tokens=False)["input_ids"]


# --- 1. the prompt is the row's ------------------------------------------------------------------------------

@pytest.mark.parametrize("row", ["sft", "dpo"])
def test_a_post_trained_row_asks_every_item_through_its_template_whatever_its_kind(chain, row):
    """A checkpoint row asked an `lm` item once got the bare text and wrote the assistant marker itself."""
    _, tok = chain[row]
    frame = benchmark()
    rows, questions = sampled.encode_questions(tok, frame, settings(ask="template"))
    for row_at, question in zip(rows, questions):
        options = frame["choices"].iloc[row_at]
        text = sampled.question_text(frame["prompt"].iloc[row_at], None if options is None else list(options))
        assert question.context.tolist() == user_turn(tok, text)
    # the options measurement too: an lm item's context is the user turn, each option the assistant's reply
    rows, items = options_path.encode_items(tok, frame, settings(ask="template"))
    mc = next(i for i, r in enumerate(rows) if frame["kind"].iloc[r] == "lm" and frame["choices"].iloc[r] is not None)
    assert items[mc].context.tolist() == user_turn(tok, frame["prompt"].iloc[rows[mc]])
    assert [o.tolist() for o in items[mc].options] == [tok(o, add_special_tokens=False)["input_ids"]
                                                       for o in items[mc].texts]


def test_a_base_asks_every_item_as_plain_text_few_shot_whatever_its_kind(chain):
    """The base's few-shot prompt for a `chat` item was chat markup; it is plain text, solved items first."""
    _, tok = chain["base"]
    frame = benchmark()
    rows, questions = sampled.encode_questions(tok, frame, settings(ask="plain", shots=2, chat_template="auto"))
    asked = {}
    for row_at, question in zip(rows, questions):
        options = frame["choices"].iloc[row_at]
        asked[row_at] = sampled.question_text(frame["prompt"].iloc[row_at], None if options is None else list(options))
    for row_at, question in zip(rows, questions):
        text = tok.decode(question.context)
        assert "<|user|>" not in text and "<|assistant|>" not in text
        *shots, own = text.split("\n\n")
        source = frame["source"] == frame["source"].iloc[row_at]
        solved = {asked[r] + " " + gold for r, gold in zip(rows, [q.gold for q in questions]) if source.iloc[r] and r != row_at}
        assert own == asked[row_at] and len(shots) == 2 and set(shots) <= solved


def test_the_papers_path_asks_each_item_in_the_format_it_is_scored_in(chain):
    """A fine-tuned task and its base (ask: item): lm items plain text, chat items through the template, so
    the paper's measurement is unchanged."""
    _, tok = chain["sft"]
    frame = benchmark()
    rows, questions = sampled.encode_questions(tok, frame, settings(ask="item"))
    for row_at, question in zip(rows, questions):
        text = tok.decode(question.context)
        assert ("<|user|>" in text) == (frame["kind"].iloc[row_at] == "chat")


# --- 2. stop strings end the generation -------------------------------------------------------------------------

def transformers_reading(model, tok, context: np.ndarray, budget: int, stop: list[str]) -> str:
    """Greedy decoding by transformers' own `generate` with its stop strings, cut before the first."""
    ids = torch.tensor([context.tolist()])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=int(budget), do_sample=False,
                         stop_strings=stop or None, tokenizer=tok, pad_token_id=tok.pad_token_id or tok.eos_token_id,
                         eos_token_id=tok.eos_token_id)
    text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    return until_stop(text, stop)


@pytest.mark.parametrize("row, ask", [("sft", "template"), ("base", "plain")])
def test_greedy_answers_end_at_stop_strings_as_transformers_ends_them(chain, row, ask):
    model, tok = chain[row]
    frame = benchmark()
    stop = ["the", "ose", "\n"]  # the random stand-ins write these often
    config = settings(ask=ask, chat_template="auto", stop=stop, max_new_tokens=16)
    rows, questions = sampled.encode_questions(tok, frame, config)
    record = sampled.evaluate_torch(model, tok, questions, config)
    limits = options_path.answer_budgets([q.context for q in questions], config)
    expected = [transformers_reading(model, tok, q.context, b, stop) for q, b in zip(questions, limits)]
    assert [g[0] for g in record["generations"]] == expected
    endless = sampled.evaluate_torch(model, tok, questions, {**config, "stop": []})
    stopped = [a[0] != b[0] for a, b in zip(record["generations"], endless["generations"])]
    assert any(stopped) and record["n_generated"].sum() < endless["n_generated"].sum()  # tokens saved


def test_a_stop_string_split_across_tokens_ends_the_generation_at_the_token_that_completes_it(chain):
    model, tok = chain["dpo"]
    contexts = [np.asarray(tok("Question: the river")["input_ids"])]
    free = generate_torch(model, tok, contexts, np.array([24]))
    text = tok.decode(free.tokens[0], skip_special_tokens=True)
    stop = text[3:6]  # three characters inside the answer: may span tokens
    ended = generate_torch(model, tok, contexts, np.array([24]), Sampling(stop=(stop,)))
    assert ended.texts[0] == text[:text.find(stop)] and not ended.capped[0]
    written = tok.decode(ended.tokens[0], skip_special_tokens=True)
    assert stop in written and stop not in tok.decode(ended.tokens[0][:-1], skip_special_tokens=True)


def test_each_decode_step_runs_fewer_operators_and_host_reads_than_transformers_generate(chain):
    """Side by side at the same batch (8 left-padded prompts, 40 new tokens), greedy and sampled: per decode
    step the loop around the model runs fewer operators than `generate`'s and reads back to the host once
    every CHECK_EVERY steps (generate: every step); the model's own forward is the same in both. Counted by
    benchmarks/generation_steps.py, whose figures are in BENCHMARKS.md."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from forgetmap.generation import CHECK_EVERY
    from generation_steps import per_step, runners

    model, tok = chain["dpo"]
    rng = np.random.default_rng(0)
    prompts = [rng.integers(5, len(tok) - 1, 24 - rng.integers(0, 7)) for _ in range(8)]
    for temperature, top_p in ((0.0, 1.0), (0.7, 0.95)):
        ours, theirs = runners(model, tok, prompts, temperature, top_p, 8 * 64)
        mine, generate = per_step(ours, model, 40), per_step(theirs, model, 40)
        assert mine["model ops"] == generate["model ops"], (mine, generate)
        assert mine["loop ops"] < generate["loop ops"], (mine, generate)
        assert mine.get("loop host reads", 0) == 1 / CHECK_EVERY <= generate["loop host reads"], (mine, generate)


@pytest.mark.parametrize("row", ["base", "sft", "dpo"])
def test_the_static_cache_a_gpu_decodes_with_writes_the_growing_caches_answers(chain, row):
    """On CUDA the decode loop keeps a key-value cache allocated whole and compiles its step (CUDA graphs replay it:
    generation.StaticDecoding); here uncompiled, in fp32: the same greedy answers, the same sampled answers by seed,
    the same cut at stop strings, with left-padded prompts read in chunks, as the growing cache writes."""
    model, tok = chain[row]
    contexts = [np.asarray(tok(t)["input_ids"])[: 4 + 3 * i] for i, t in enumerate(sentences(8, seed=5))]
    limits = np.array([16, 3, 16, 9, 16, 16, 1, 16])
    for sampling, seed in ((Sampling(), 0), (Sampling(0.8, 0.95), 3), (Sampling(0.8, 0.95, ("the",)), 4)):
        growing = generate_torch(model, tok, contexts, limits, sampling, seed, token_budget=8 * 12)
        static = generate_torch(model, tok, contexts, limits, sampling, seed, token_budget=8 * 12, static=True)
        assert all(np.array_equal(a, b) for a, b in zip(growing.tokens, static.tokens)), sampling
        assert growing.texts == static.texts and np.array_equal(growing.capped, static.capped)
    assert sum(len(t) for t in growing.tokens) > 20


def test_prompts_read_in_chunks_give_the_answers_read_at_once(chain, monkeypatch):
    """On a GPU a batch is sized by the key-value cache the device holds and its prompts are read a chunk of
    the token budget at a time: the same greedy answers (and texts) as one forward over the whole prompts."""
    import forgetmap.generation as generation

    model, tok = chain["sft"]
    contexts = [np.asarray(tok(t)["input_ids"]) for t in sentences(6, seed=4)]
    whole = generate_torch(model, tok, contexts, np.full(6, 12), token_budget=4096)
    monkeypatch.setattr(generation, "cache_budget", lambda model, budget: (10**6, "a large GPU's"))
    chunked = generate_torch(model, tok, contexts, np.full(6, 12), token_budget=6 * 5)  # 5 positions a chunk
    assert max(len(c) for c in contexts) > 10
    assert all(np.array_equal(a, b) for a, b in zip(whole.tokens, chunked.tokens)) and whole.texts == chunked.texts


def test_on_a_gpu_a_batch_holds_the_key_value_cache_half_the_free_memory_holds(monkeypatch):
    """OLMo-2 1B in bf16 keeps 128 KiB of keys and values per token: with 70 GiB free (40 of them reserved by
    torch's allocator and unused), the batches may hold 280,000 tokens of cache, and the log says so."""
    from transformers import Olmo2Config

    from forgetmap.generation import cache_budget

    config = Olmo2Config(hidden_size=2048, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=16)
    weight = SimpleNamespace(device=torch.device("cuda", 0), element_size=lambda: 2)  # a bf16 weight on a GPU
    model = SimpleNamespace(config=config, parameters=lambda: iter([weight]))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: (30 * 2**30, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda d: 45 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d: 5 * 2**30)
    tokens, why = cache_budget(model, 16384)
    assert tokens == 35 * 2**30 // (128 * 2**10) == 286720
    assert why == "286720 tokens: 0.5 of the 70.0 GiB free on cuda:0 at 128 KiB of keys and values per token"


# --- 3. a question is never cut -----------------------------------------------------------------------------------

def test_an_answer_budget_is_the_room_its_question_leaves_and_the_question_stays_whole(chain, caplog):
    """max_new_tokens above the model's 128 positions once cut every question to its last token."""
    model, tok = chain["sft"]
    frame = benchmark()
    config = settings(ask="template", max_new_tokens=300, temperature=0.6, top_p=0.95, seeds=2)
    rows, questions = sampled.encode_questions(tok, frame, config)
    for row_at, question in zip(rows, questions):
        assert tok.decode(question.context).count(frame["prompt"].iloc[row_at].split("\n")[0]) == 1
    limits = options_path.answer_budgets([q.context for q in questions], config)
    assert (limits == 128 - np.array([len(q.context) for q in questions])).all() and (limits > 40).all()
    record = sampled.evaluate_torch(model, tok, questions, config)
    assert (record["n_generated"] <= 2 * limits).all()
    # random weights rarely write EOS: most answers run to the end of the positions, and that is reported
    capped = record["n_capped"].to_numpy()
    assert capped.max() == 2 and (capped > 0).mean() > 0.5
    assert "answers ran to their budget (max_new_tokens 300, or the positions their question left)" in caplog.text
    assert budgets([10, 127, 128, 200], 300, 128).tolist() == [118, 1, 0, 0]
    assert budgets([10], 300, None).tolist() == [300]


def test_a_question_that_alone_fills_the_positions_stops_the_job_naming_the_item_and_the_key(chain):
    _, tok = chain["base"]
    frame = benchmark()
    frame.loc[3, "prompt"] = " ".join(sentences(30, seed=5)) + "\nAnswer:"
    config = settings(ask="plain", chat_template="auto", row="models.chain")
    rows, questions = sampled.encode_questions(tok, frame, config)
    with pytest.raises(DataError, match=r"item 'mc-3' \(source 'mmlu'\) needs \d{3} tokens whole \(its prompt and one "
                                        r"answer token\) and the model has 128 positions: 1 of 24 items of this shard "
                                        r"cannot be asked without cutting the question; shorten those items"):
        options_path.check_room(frame, rows, questions, 128, config)
    rows, items = options_path.encode_items(tok, frame, config)
    with pytest.raises(DataError, match="item 'mc-3'"):
        options_path.check_room(frame, rows, items, 128, config)
    options_path.check_room(frame, rows, items, None, config)  # positions unknown: nothing to check
    few_shot = {**config, "shots": 2}  # the long item is also a solved example before others
    rows, questions = sampled.encode_questions(tok, frame, few_shot)
    with pytest.raises(DataError, match=r"of 24 items of this shard cannot be asked without cutting the question; "
                                        r"lower config key models.chain.shots \(2 solved items before each question\)"):
        options_path.check_room(frame, rows, questions, 128, few_shot)


# --- vLLM: the same requests -----------------------------------------------------------------------------------------

def test_vllm_requests_carry_each_answers_budget_its_seed_and_the_stop_strings(monkeypatch):
    """Read against vLLM's API (`SamplingParams(max_tokens, stop, seed)`, `finish_reason`): an engine that
    records what it is sent stands in for it here."""
    from forgetmap.generation import generate_vllm

    class Params(SimpleNamespace):
        pass

    class Engine:
        def get_tokenizer(self):
            return IdTokenizer(0, 2)

        def generate(self, prompts, params):  # seed 1 stops at the stop string, after "1 1"
            self.prompts, self.params = prompts, params
            return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[1, 2] if p.seed else [3, 4, 5],
                                                             finish_reason="stop" if p.seed else "length")])
                    for p in params]

    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=Params))
    monkeypatch.setitem(sys.modules, "vllm.inputs", SimpleNamespace(TokensPrompt=dict))
    engine = Engine()
    contexts = [np.array([5, 6, 7]), np.array([8] * 127), np.array([9])]
    limits = budgets([len(c) for c in contexts], 300, 128)
    out = generate_vllm(engine, contexts, limits, Sampling(0.6, 0.95, ("\n\n",)), [0, 1])
    assert [p["prompt_token_ids"] for p in engine.prompts] == [[5, 6, 7]] * 2 + [[8] * 127] * 2 + [[9]] * 2
    assert [p.max_tokens for p in engine.params] == [125, 125, 1, 1, 127, 127]
    assert [p.seed for p in engine.params] == [0, 1] * 3 and all(p.stop == ["\n\n"] for p in engine.params)
    assert out[0].texts == ["3 4 5"] * 3 and out[1].texts == ["1"] * 3  # decoded here, EOS (2) left out
    assert out[0].capped.tolist() == [True] * 3 and out[1].capped.tolist() == [False] * 3
