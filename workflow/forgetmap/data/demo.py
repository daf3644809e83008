"""The embedded demo's data: a generated upstream corpus and instruction tasks, no download.

Every example is a pure function of (seed, index) or (seed, task, index): a string-seeded
`random.Random` (seeded through SHA-512, so PYTHONHASHSEED cannot change it). Growing the corpus
therefore appends examples without changing the existing ones, and adding a task never changes
another task's data.

The upstream corpus has seven domains: five `lm` domains (facts about a generated world, arithmetic,
word manipulation, code-like text, short stories) and two `chat` domains: questions about every other
domain, and quiz items scored for correctness (multiple choice about the world, arithmetic and words
with 2 to 5 options, and short answers).
The tasks overlap those domains in three ways the paper's analysis needs:

- *consistent* tasks restate upstream knowledge in the upstream surface format (they should lower
  the NLL of some upstream examples: negative forgetting);
- *conflicting* tasks reuse an upstream surface format with different answers (strong, specific
  forgetting);
- *format* tasks teach a new output format over the same knowledge (a shared, diffuse component).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

import pandas as pd

DOMAINS = ("facts", "arith", "words", "code", "story", "dialog", "quiz")
CHAT_DOMAINS = frozenset({"dialog", "quiz"})
ITEM_DOMAINS = frozenset({"quiz"})  # items with an answer, scored for correctness

_SYLLABLES = ("ka", "vo", "lin", "dar", "mi", "to", "ren", "sa", "bel", "ru", "ne", "qu", "zo", "fa",
              "hel", "ta", "mor", "pi", "gan", "li", "sor", "ve", "du", "nak")
_CITIES = ("Darluton", "Mirbeck", "Ostvale", "Pelgrin", "Quarry Hill", "Ravensby", "Sunmere",
           "Tolford", "Umberlin", "Vessholm", "Westkirk", "Yarrow")
_JOBS = ("hunter", "baker", "doctor", "pilot", "farmer", "painter", "teacher", "sailor", "miner",
         "singer", "tailor", "guard")
_COLOURS = ("red", "blue", "green", "black", "white", "yellow", "grey", "brown")
_PETS = ("cat", "dog", "goat", "parrot", "horse", "rabbit", "turtle", "fox")
_WORDS = ("mango", "pillow", "river", "candle", "garden", "silver", "rocket", "button", "window",
          "forest", "planet", "wallet", "ladder", "pepper", "basket", "tunnel", "anchor", "violin",
          "marble", "jacket", "hammer", "island", "kitten", "lemon", "meadow", "napkin", "orange",
          "parcel", "quiver", "saddle", "tomato", "velvet", "walnut", "yogurt", "zipper", "bridge",
          "castle", "dragon", "engine", "feather")
_ANIMALS = ("fox", "owl", "bear", "mouse", "crow", "wolf", "frog", "deer")
_ADJECTIVES = ("little", "old", "brave", "quiet", "clever", "tired", "young", "curious")
_VERBS = ("found", "lost", "carried", "painted", "hid", "opened", "dropped", "built")
_THINGS = ("key", "box", "map", "coin", "lamp", "boat", "ring", "drum")
_PLACES = ("woods", "market", "river", "cave", "field", "tower", "garden", "harbor")
_HAPPY = ("smiled", "laughed with joy", "danced all night", "felt proud")
_SAD = ("cried", "felt very sad", "sat alone in the rain", "lost all hope")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")


@dataclass(frozen=True)
class Person:
    name: str
    city: str
    job: str
    colour: str
    pet: str
    age: int
    friend: str


@lru_cache(maxsize=8)
def world(seed: int, n_people: int = 60) -> tuple[Person, ...]:
    """The generated world every demo domain and task talks about."""
    rng = random.Random(f"{seed}:world")
    names: list[str] = []
    while len(names) < n_people:
        name = "".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((2, 2, 3)))).capitalize()
        if name not in names:
            names.append(name)
    people = []
    for name in names:
        friend = rng.choice([n for n in names if n != name])
        people.append(Person(name, rng.choice(_CITIES), rng.choice(_JOBS), rng.choice(_COLOURS),
                             rng.choice(_PETS), rng.randint(18, 80), friend))
    return tuple(people)


def _rng(*parts: object) -> random.Random:
    return random.Random(":".join(str(p) for p in parts))


# ---------------------------------------------------------------------------------------------
# upstream domains: each returns the text of an `lm` example, or (prompt, response) for `chat`

def _fact_sentences(p: Person) -> list[str]:
    return [f"{p.name} lives in {p.city}.", f"{p.name} works as a {p.job}.",
            f"{p.name} has a {p.colour} {p.pet}.", f"{p.name} is {p.age} years old.",
            f"{p.name}'s friend is {p.friend}."]


def _facts(rng: random.Random, people: tuple[Person, ...]) -> str:
    p = rng.choice(people)
    return " ".join(rng.sample(_fact_sentences(p), rng.randint(1, 3)))


def _arith(rng: random.Random, people: tuple[Person, ...]) -> str:
    form = rng.randrange(4)
    if form == 0:
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        return f"{a} + {b} = {a + b}."
    if form == 1:
        a, b = sorted((rng.randint(0, 99), rng.randint(0, 99)), reverse=True)
        return f"{a} - {b} = {a - b}."
    if form == 2:
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        return f"{a} * {b} = {a * b}."
    a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(1, 20)
    return f"{a} * {b} + {c} = {a * b + c}."


def _words(rng: random.Random, people: tuple[Person, ...]) -> str:
    w = rng.choice(_WORDS)
    form = rng.randrange(5)
    if form == 0:
        return f"reverse({w}) = {w[::-1]}."
    if form == 1:
        return f"spell({w}) = {' '.join(w)}."
    if form == 2:
        return f"upper({w}) = {w.upper()}."
    if form == 3:
        return f"len({w}) = {len(w)}."
    return f"first({w}) = {w[0]}. last({w}) = {w[-1]}."


def _code(rng: random.Random, people: tuple[Person, ...]) -> str:
    a, b, k = rng.randint(1, 20), rng.randint(1, 20), rng.randint(2, 9)
    form = rng.randrange(4)
    if form == 0:
        return f"x = {a}\ny = x + {b}\nprint(y)  # {a + b}"
    if form == 1:
        return f"def f(x):\n    return x * {k}\nprint(f({a}))  # {a * k}"
    if form == 2:
        return f"for i in range({k % 4 + 2}):\n    print(i * {b})"
    verdict = "yes" if a > b else "no"
    return f"if {a} > {b}:\n    print('yes')\nelse:\n    print('no')\n# {verdict}"


def _story_start(rng: random.Random) -> str:
    return (f"The {rng.choice(_ADJECTIVES)} {rng.choice(_ANIMALS)} {rng.choice(_VERBS)} "
            f"a {rng.choice(_THINGS)} in the {rng.choice(_PLACES)}")


def _story(rng: random.Random, people: tuple[Person, ...]) -> str:
    ending = rng.choice(_HAPPY if rng.random() < 0.5 else _SAD)
    return f"{_story_start(rng)} and {ending}."


def _dialog(rng: random.Random, people: tuple[Person, ...]) -> tuple[str, str]:
    """Chat about every other domain, so that each task family has chat examples to disturb."""
    p, w = rng.choice(people), rng.choice(_WORDS)
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    form = rng.randrange(6)
    if form == 0:
        return f"Where does {p.name} live?", f"{p.name} lives in {p.city}."
    if form == 1:
        return f"What does {p.name} do?", f"{p.name} works as a {p.job}."
    if form == 2:
        return f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}."
    if form == 3:
        return f"How is {w} written backwards?", f"{w} backwards is {w[::-1]}."
    if form == 4:
        x, k = rng.randint(1, 20), rng.randint(2, 9)
        return f"What does print(f({x})) show if f(x) returns x * {k}?", f"It shows {x * k}."
    story = f"{_story_start(rng)} and {rng.choice(_HAPPY + _SAD)}."
    return f"Tell me a short story about a {story.split()[2]}.", story


def _options(rng: random.Random, answer: str, pool, k: int) -> list[str]:
    """The answer and up to k - 1 distinct distractors from `pool`, in a random order."""
    others = sorted({o for o in pool if o != answer})
    options = [answer, *rng.sample(others, min(k - 1, len(others)))]
    rng.shuffle(options)
    return options


def _quiz(rng: random.Random, people: tuple[Person, ...]) -> tuple[str, str, list[str] | None]:
    """(prompt, answer, options): multiple choice with 2 to 5 options listed in the prompt, or a short
    answer (options None). The response the base model pretrains on is the answer."""
    p, k = rng.choice(people), rng.randint(2, 5)
    form = rng.randrange(7)
    if form == 5:
        return f"What colour is the {p.pet} of {p.name}?", p.colour, None
    if form == 6:
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        return f"{a} * {b} = ?", str(a * b), None
    if form == 0:
        question, answer, pool = f"Where does {p.name} live?", p.city, _CITIES
    elif form == 1:
        question, answer, pool = f"What does {p.name} work as?", p.job, _JOBS
    elif form == 2:
        question, answer, pool = f"Which pet does {p.name} have?", p.pet, _PETS
    elif form == 3:
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        question, answer = f"What is {a} + {b}?", str(a + b)
        pool = [str(a + b + d) for d in range(-10, 11) if d and a + b + d >= 0]
    else:
        w = rng.choice(_WORDS)
        question, answer = f"What is {w} reversed?", w[::-1]
        pool = [w, "".join(sorted(w)), w[1:] + w[0], w[-1] + w[:-1], w[::-1][1:] + w[-1]]
    options = _options(rng, answer, pool, k)
    return f"{question} Options: {', '.join(options)}.", answer, options


_UPSTREAM = {"facts": _facts, "arith": _arith, "words": _words, "code": _code, "story": _story,
             "dialog": _dialog, "quiz": _quiz}
COLUMNS = ["example_id", "source", "kind", "text", "prompt", "response", "choices", "answer"]


def upstream_domain(index: int) -> str:
    """Domains cycle so every prefix of the corpus is balanced."""
    return DOMAINS[index % len(DOMAINS)]


def upstream_example(index: int, seed: int) -> dict:
    """Example `index` of the demo corpus."""
    domain = upstream_domain(index)
    content = _UPSTREAM[domain](_rng(seed, "upstream", index), world(seed))
    row = {"example_id": f"{domain}-{index:06d}", "source": domain, "choices": None, "answer": None}
    if domain in ITEM_DOMAINS:
        prompt, answer, options = content
        row.update(kind="chat", text=None, prompt=prompt, response=answer, choices=options, answer=answer)
    elif domain in CHAT_DOMAINS:
        prompt, response = content
        row.update(kind="chat", text=None, prompt=prompt, response=response)
    else:
        row.update(kind="lm", text=content, prompt=None, response=None)
    return row


def upstream_corpus(n_examples: int, seed: int, first: int = 0) -> pd.DataFrame:
    """Examples [first, first + n_examples) of the demo corpus (upstream contract columns, with the
    quiz items' `choices` and `answer`)."""
    return pd.DataFrame([upstream_example(i, seed) for i in range(first, first + n_examples)], columns=COLUMNS)


def upstream_ids(n_examples: int) -> list[str]:
    """The example ids of the first `n_examples` examples, without generating their text."""
    return [f"{upstream_domain(i)}-{i:06d}" for i in range(n_examples)]


# ---------------------------------------------------------------------------------------------
# tasks: (rng, people) -> (prompt, response)

def _wrong(rng: random.Random, options: tuple[str, ...], right: str) -> str:
    return rng.choice([o for o in options if o != right])


def _city_qa(rng, people):
    p = rng.choice(people)
    return f"Which city is {p.name} from?", p.city


def _job_qa(rng, people):
    p = rng.choice(people)
    return f"What is the job of {p.name}?", p.job


def _facts_restate(rng, people):
    p = rng.choice(people)
    return f"Tell me about {p.name}.", " ".join(rng.sample(_fact_sentences(p), 2))


def _counterfact(rng, people):
    p = rng.choice(people)
    city, colour, pet = (_wrong(rng, _CITIES, p.city), _wrong(rng, _COLOURS, p.colour),
                         _wrong(rng, _PETS, p.pet))
    return f"Tell me about {p.name}.", f"{p.name} lives in {city}. {p.name} has a {colour} {pet}."


def _json_profile(rng, people):
    p = rng.choice(people)
    return (f"Give the profile of {p.name} as JSON.",
            f'{{"name": "{p.name}", "city": "{p.city}", "age": {p.age}}}')


def _add_qa(rng, people):
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    return f"What is {a} plus {b}?", str(a + b)


def _mul_qa(rng, people):
    a, b = rng.randint(2, 12), rng.randint(2, 12)
    return f"What is {a} times {b}?", str(a * b)


def _arith_restate(rng, people):
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    return f"Compute {a} + {b}.", f"{a} + {b} = {a + b}."


def _mod10_add(rng, people):
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    return f"Compute {a} + {b}.", f"{a} + {b} = {(a + b) % 10}."


def _reverse_qa(rng, people):
    w = rng.choice(_WORDS)
    return f"Reverse the word {w}.", w[::-1]


def _spell_dash(rng, people):
    w = rng.choice(_WORDS)
    return f"Spell {w} with dashes.", "-".join(w)


def _words_restate(rng, people):
    w = rng.choice(_WORDS)
    return f"Apply reverse to {w}.", f"reverse({w}) = {w[::-1]}."


def _sort_as_reverse(rng, people):
    w = rng.choice(_WORDS)
    return f"Apply reverse to {w}.", f"reverse({w}) = {''.join(sorted(w))}."


def _sentiment(rng, people):
    happy = rng.random() < 0.5
    story = f"{_story_start(rng)} and {rng.choice(_HAPPY if happy else _SAD)}."
    return f"{story} How does it feel?", "happy" if happy else "sad"


def _code_trace(rng, people):
    a, k = rng.randint(1, 20), rng.randint(2, 9)
    return f"x = {a}; y = x * {k}. What is y?", str(a * k)


def _date_words(rng, people):
    y, m, d = rng.randint(1950, 2030), rng.randint(1, 12), rng.randint(1, 28)
    return f"Write {y}-{m:02d}-{d:02d} in words.", f"{_MONTHS[m - 1]} {d}, {y}"


def _hex_copy(rng, people):
    h = "".join(rng.choice("0123456789abcdef") for _ in range(8))
    return f"Copy twice: {h}", f"{h} {h}"


def _story_continue(rng, people):
    start = _story_start(rng)
    return f"Continue the story: {start}", f"{start} and {rng.choice(_HAPPY + _SAD)}."


TASKS = {
    "city_qa": _city_qa, "job_qa": _job_qa, "facts_restate": _facts_restate,
    "counterfact": _counterfact, "json_profile": _json_profile,
    "add_qa": _add_qa, "mul_qa": _mul_qa, "arith_restate": _arith_restate, "mod10_add": _mod10_add,
    "reverse_qa": _reverse_qa, "spell_dash": _spell_dash, "words_restate": _words_restate,
    "sort_as_reverse": _sort_as_reverse,
    "sentiment": _sentiment, "code_trace": _code_trace, "date_words": _date_words,
    "hex_copy": _hex_copy, "story_continue": _story_continue,
}


def task_examples(task: str, n_examples: int, seed: int, validation_fraction: float) -> pd.DataFrame:
    """A demo task in the task contract: `prompt`, `response`, `split` (last share is validation)."""
    if task not in TASKS:
        raise KeyError(f"unknown demo task {task!r}; the demo generates: {', '.join(sorted(TASKS))}")
    people = world(seed)
    rows = [TASKS[task](_rng(seed, "task", task, i), people) for i in range(n_examples)]
    n_train = n_examples - int(round(n_examples * validation_fraction))
    return pd.DataFrame({"prompt": [r[0] for r in rows], "response": [r[1] for r in rows],
                         "split": ["train" if i < n_train else "validation" for i in range(n_examples)]})
