"""Triple retrieval: which fusion ranks the answer triple first.

A fixed, versioned set of facts (:data:`FACTS`, version :data:`DATA_VERSION`) about a
few people is stored for one user with a :class:`~llama_memory.sources.TripleSource`
(in-memory SQLite, an in-process Chroma, the offline embedding model); some facts
are later superseded (a move, a new job), so the question's answer is the current
value. Each question of :data:`QUESTIONS` is a paraphrase whose answer triple is
known; most name the person, some do not (words and meaning alone), a few ask
about a person's relative (the second hop). For each fusion (``scores``: normalised
scores, as the vector source; ``rrf``: reciprocal rank) and each ``hops`` (1, 2) it
reports hit@1, hit@3 (the answer among the first 1 / 3 triples) and MRR@5.

Run::

    .venv/bin/python -m bench.triples            # a few seconds after the model loads
    .venv/bin/python -m bench.triples --json bench/results/triples.json

The figures and the choice they led to are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

#: Bump when FACTS or QUESTIONS change: figures of different versions do not compare.
DATA_VERSION = 1

#: (subject, predicate, object, stated on): facts in the order they were told.
FACTS: tuple[tuple[str, str, str, str], ...] = (
    ("Alice", "lives in", "Paris", "2019-03-01"),
    ("Alice", "works as", "architect", "2019-03-01"),
    ("Alice", "has sister", "Mary", "2019-04-02"),
    ("Alice", "likes", "jazz", "2019-05-10"),
    ("Alice", "is allergic to", "peanuts", "2019-06-01"),
    ("Alice", "owns", "a grey cat called Tom", "2019-07-12"),
    ("Alice", "lives in", "Lisbon", "2022-09-01"),  # moved: supersedes Paris
    ("Mary", "works as", "dentist", "2019-04-02"),
    ("Mary", "lives in", "Berlin", "2019-04-02"),
    ("Mary", "plays", "the cello", "2020-01-15"),
    ("Bob", "lives in", "Toronto", "2018-02-11"),
    ("Bob", "works as", "nurse", "2018-02-11"),
    ("Bob", "drives", "a red pickup truck", "2018-08-20"),
    ("Bob", "has brother", "Carlos", "2018-09-01"),
    ("Bob", "supports", "the Maple Leafs", "2019-01-03"),
    ("Bob", "works as", "paramedic", "2021-05-05"),  # new job: supersedes nurse
    ("Carlos", "studies", "marine biology", "2020-09-01"),
    ("Carlos", "lives in", "Halifax", "2020-09-01"),
    ("Dana", "lives in", "Nairobi", "2017-06-30"),
    ("Dana", "works as", "software engineer", "2017-06-30"),
    ("Dana", "runs", "marathons", "2018-04-22"),
    ("Dana", "speaks", "Swahili", "2018-05-01"),
    ("Dana", "is vegetarian since", "2015", "2018-05-02"),
    ("Dana", "has daughter", "Zuri", "2019-12-24"),
    ("Zuri", "goes to", "Riverside kindergarten", "2023-01-09"),
    ("Eve", "lives in", "Osaka", "2020-02-02"),
    ("Eve", "teaches", "high-school chemistry", "2020-02-02"),
    ("Eve", "collects", "vintage fountain pens", "2020-03-03"),
    ("Eve", "birthday is", "14 October", "2020-03-04"),
    ("Eve", "has partner", "Kenji", "2021-07-07"),
    ("Kenji", "works as", "sushi chef", "2021-07-07"),
    ("Frank", "lives in", "Denver", "2016-10-10"),
    ("Frank", "works as", "pilot", "2016-10-10"),
    ("Frank", "grows", "tomatoes and chillies", "2019-06-06"),
    ("Frank", "is learning", "Italian", "2022-01-20"),
    ("Frank", "owns", "a golden retriever called Biscuit", "2018-12-25"),
    ("Frank", "lives in", "Boulder", "2023-03-15"),  # moved: supersedes Denver
)

#: (question, answer (subject, predicate, object)). The answer is a current triple.
QUESTIONS: tuple[tuple[str, tuple[str, str, str]], ...] = (
    ("Which city is Alice living in these days?", ("Alice", "lives in", "Lisbon")),
    ("What is Alice's job?", ("Alice", "works as", "architect")),
    ("Who is Alice's sibling?", ("Alice", "has sister", "Mary")),
    ("What kind of music does Alice enjoy?", ("Alice", "likes", "jazz")),
    ("Can Alice eat satay sauce, any food allergies?", ("Alice", "is allergic to", "peanuts")),
    ("Does Alice have a pet?", ("Alice", "owns", "a grey cat called Tom")),
    ("What does Mary do for a living?", ("Mary", "works as", "dentist")),
    ("Where is Mary based?", ("Mary", "lives in", "Berlin")),
    ("Which instrument does Mary play?", ("Mary", "plays", "the cello")),
    ("Where does Bob live?", ("Bob", "lives in", "Toronto")),
    ("What is Bob's current occupation?", ("Bob", "works as", "paramedic")),
    ("What car does Bob have?", ("Bob", "drives", "a red pickup truck")),
    ("Which hockey team is Bob a fan of?", ("Bob", "supports", "the Maple Leafs")),
    ("What is Carlos studying at university?", ("Carlos", "studies", "marine biology")),
    ("In which city does Carlos live?", ("Carlos", "lives in", "Halifax")),
    ("Where is Dana's home?", ("Dana", "lives in", "Nairobi")),
    ("What is Dana's profession?", ("Dana", "works as", "software engineer")),
    ("Which sport does Dana do?", ("Dana", "runs", "marathons")),
    ("What languages does Dana know?", ("Dana", "speaks", "Swahili")),
    ("Does Dana eat meat?", ("Dana", "is vegetarian since", "2015")),
    ("Does Dana have children?", ("Dana", "has daughter", "Zuri")),
    ("Which school does Zuri attend?", ("Zuri", "goes to", "Riverside kindergarten")),
    ("Which country does Eve live in, which city?", ("Eve", "lives in", "Osaka")),
    ("What subject does Eve teach?", ("Eve", "teaches", "high-school chemistry")),
    ("What is Eve's hobby?", ("Eve", "collects", "vintage fountain pens")),
    ("When should I send Eve a birthday card?", ("Eve", "birthday is", "14 October")),
    ("Who is Eve in a relationship with?", ("Eve", "has partner", "Kenji")),
    ("What does Kenji cook professionally?", ("Kenji", "works as", "sushi chef")),
    ("Where has Frank moved to?", ("Frank", "lives in", "Boulder")),
    ("What is Frank's job?", ("Frank", "works as", "pilot")),
    ("What vegetables does Frank grow?", ("Frank", "grows", "tomatoes and chillies")),
    ("Which language is Frank studying?", ("Frank", "is learning", "Italian")),
    ("What is the name of Frank's dog?", ("Frank", "owns", "a golden retriever called Biscuit")),
    # No person named: words and meaning alone.
    ("Who is the dentist?", ("Mary", "works as", "dentist")),
    ("Who plays the cello?", ("Mary", "plays", "the cello")),
    ("Who drives a pickup truck?", ("Bob", "drives", "a red pickup truck")),
    ("Who studies marine biology?", ("Carlos", "studies", "marine biology")),
    ("Who speaks Swahili?", ("Dana", "speaks", "Swahili")),
    ("Who collects fountain pens?", ("Eve", "collects", "vintage fountain pens")),
    ("Whose dog is Biscuit?", ("Frank", "owns", "a golden retriever called Biscuit")),
    ("Who is a sushi chef?", ("Kenji", "works as", "sushi chef")),
    ("Who is allergic to peanuts?", ("Alice", "is allergic to", "peanuts")),
    # A relative of the person named: the second hop.
    ("What does Alice's sister do for work?", ("Mary", "works as", "dentist")),
    ("Where does Bob's brother live?", ("Carlos", "lives in", "Halifax")),
    ("Which kindergarten does Dana's daughter go to?", ("Zuri", "goes to", "Riverside kindergarten")),
    ("What does Eve's partner do?", ("Kenji", "works as", "sushi chef")),
)

FUSIONS = ("scores", "rrf")
HOPS = (1, 2)
K = 5


def run(fusions: Sequence[str] = FUSIONS, hops: Sequence[int] = HOPS) -> dict[str, Any]:
    """Store :data:`FACTS` once per fusion, ask every question; the figures by
    (fusion, hops)."""
    from llama_memory import Scope, default_embedding
    from llama_memory.memory.wiring import default_triple_source
    from llama_memory.storage.sqlite import SQLiteStore

    embed = default_embedding()
    user = Scope(user_id="bench-triples")
    results: dict[str, Any] = {"data_version": DATA_VERSION, "questions": len(QUESTIONS), "k": K, "runs": {}}
    for fusion in fusions:
        store = SQLiteStore()  # in memory; the source's Chroma collections are in-process
        source = default_triple_source(store, None, embed, fusion=fusion)
        try:
            for subject, predicate, obj, day in FACTS:
                source.add_triples([(subject, predicate, obj)], user, event_time=day)
            source.flush()
            for n_hops in hops:
                hits1 = hits3 = 0
                reciprocal = 0.0
                started = time.perf_counter()
                for question, answer in QUESTIONS:
                    found = source.search(question, user, k=K, hops=n_hops)
                    ranked = [
                        (r.metadata["subject"], r.metadata["predicate"], r.metadata["object"])
                        for r in found
                    ]
                    rank = ranked.index(answer) + 1 if answer in ranked else None
                    hits1 += rank == 1
                    hits3 += rank is not None and rank <= 3
                    reciprocal += 1 / rank if rank else 0.0
                elapsed = time.perf_counter() - started
                results["runs"][f"{fusion} hops={n_hops}"] = {
                    "hit@1": hits1 / len(QUESTIONS),
                    "hit@3": hits3 / len(QUESTIONS),
                    f"mrr@{K}": reciprocal / len(QUESTIONS),
                    "ms_per_question": 1000 * elapsed / len(QUESTIONS),
                }
        finally:
            source.close()
            source.reset(user)
            store.close()
    return results


def report(results: dict[str, Any]) -> str:
    """The figures as a table."""
    lines = [
        f"bench.triples: data v{results['data_version']}, {len(FACTS)} facts, "
        f"{results['questions']} questions, k={results['k']}",
        "",
        f"{'fusion':<16}{'hit@1':>8}{'hit@3':>8}{'mrr@' + str(results['k']):>8}{'ms/q':>8}",
    ]
    for name, row in results["runs"].items():
        lines.append(
            f"{name:<16}{row['hit@1']:>8.3f}{row['hit@3']:>8.3f}{row[f'mrr@{K}']:>8.3f}"
            f"{row['ms_per_question']:>8.1f}"
        )
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> None:
    """``python -m bench.triples [--json PATH]``."""
    parser = argparse.ArgumentParser(prog="python -m bench.triples", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    results = run()
    print(report(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
