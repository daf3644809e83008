"""The demo generator: deterministic, balanced, append-only, and tasks independent of each other."""

from forgetmap.data import demo


def test_corpus_is_a_pure_function_of_seed_and_index():
    a = demo.upstream_corpus(60, 1234)
    b = demo.upstream_corpus(60, 1234)
    assert a.equals(b)
    assert not a.equals(demo.upstream_corpus(60, 99))


def test_growing_the_corpus_appends_without_changing_existing_examples():
    small, large = demo.upstream_corpus(30, 1234), demo.upstream_corpus(90, 1234)
    assert large.iloc[:30].reset_index(drop=True).equals(small)
    assert demo.upstream_corpus(30, 1234, first=60).equals(large.iloc[60:].reset_index(drop=True))
    assert demo.upstream_ids(90) == large["example_id"].tolist()


def test_quiz_items_have_2_to_5_options_holding_the_answer_or_are_short_answers():
    quiz = demo.upstream_corpus(700, 1234).query("source == 'quiz'")
    choices = quiz["choices"].dropna()
    assert choices.map(len).between(2, 5).all() and set(choices.map(len)) == {2, 3, 4, 5}
    assert all(a in c for a, c in zip(quiz.loc[choices.index, "answer"], choices))
    assert (quiz["answer"] == quiz["response"]).all() and 0 < quiz["choices"].isna().sum() < len(quiz) / 2


def test_corpus_covers_every_domain_with_lm_and_chat_examples():
    corpus = demo.upstream_corpus(700, 1234)
    assert set(corpus["source"]) == set(demo.DOMAINS)
    assert corpus["source"].value_counts().nunique() == 1  # balanced
    assert set(corpus["kind"]) == {"lm", "chat"}
    assert corpus["example_id"].is_unique
    lm = corpus[corpus["kind"] == "lm"]
    chat = corpus[corpus["kind"] == "chat"]
    assert lm["text"].str.len().min() > 0 and chat["response"].str.len().min() > 0


def test_tasks_are_independent_and_split():
    a = demo.task_examples("mod10_add", 40, 1234, 0.25)
    assert a.equals(demo.task_examples("mod10_add", 40, 1234, 0.25))
    assert (a["split"] == "validation").sum() == 10
    first = demo.task_examples("city_qa", 40, 1234, 0.25)
    assert not first["prompt"].equals(a["prompt"])


def test_conflicting_tasks_reuse_the_upstream_format_with_other_answers():
    task = demo.task_examples("mod10_add", 50, 1234, 0.0)
    for prompt, response in zip(task["prompt"], task["response"]):
        a, b = (int(x) for x in prompt.removeprefix("Compute ").rstrip(".").split(" + "))
        assert response == f"{a} + {b} = {(a + b) % 10}."
    facts = demo.task_examples("facts_restate", 20, 1234, 0.0)
    world = {p.name: p for p in demo.world(1234)}
    for prompt, response in zip(facts["prompt"], facts["response"]):
        name = prompt.removeprefix("Tell me about ").rstrip(".")
        true_sentences = demo._fact_sentences(world[name])
        assert all(s + "." in true_sentences for s in response.rstrip(".").split(". "))
    counter = demo.task_examples("counterfact", 20, 1234, 0.0)
    for prompt, response in zip(counter["prompt"], counter["response"]):
        name = prompt.removeprefix("Tell me about ").rstrip(".")
        assert not any(s + "." in demo._fact_sentences(world[name]) for s in response.rstrip(".").split(". "))
