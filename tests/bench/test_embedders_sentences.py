"""The sentence mode of ``bench.embedders``: the splitter, a record's best sentence and
the AUC it reports (the model itself is run by ``python -m bench.embedders --sentences``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench import embedders
from bench.embedders import SentencePassages, auc, split_sentences


def test_a_message_splits_at_end_punctuation_emoji_and_line_breaks() -> None:
    text = ("It's barely 3pm and already pitch dark outside 😩 nobody warned me about November "
            "in Tampere when we moved here last spring. Any tips for staying awake in the afternoons?\n"
            "Asking for a very tired friend")
    assert split_sentences(text, min_words=4) == [
        "It's barely 3pm and already pitch dark outside 😩",
        "nobody warned me about November in Tampere when we moved here last spring.",
        "Any tips for staying awake in the afternoons?",
        "Asking for a very tired friend",
    ]


def test_a_short_sentence_joins_a_neighbour() -> None:
    text = "Ugh, long week. I just moved to Porto last month, still unpacking boxes. Any tips?"
    # The first joins the one after it, the last the one before it.
    assert split_sentences(text, min_words=4) == [
        "Ugh, long week. I just moved to Porto last month, still unpacking boxes. Any tips?"
    ]
    assert split_sentences(text, min_words=3) == [
        "Ugh, long week.", "I just moved to Porto last month, still unpacking boxes. Any tips?"
    ]
    assert split_sentences("hi", min_words=4) == ["hi"]
    assert split_sentences("", min_words=4) == [""]


def test_sentences_in_a_script_without_spaces_split_at_its_full_stops() -> None:
    assert split_sentences("我们上个月搬到了波尔图住了。我现在还在慢慢地整理很多箱子！", min_words=4) == [
        "我们上个月搬到了波尔图住了。", "我现在还在慢慢地整理很多箱子！"
    ]


class _Unit:
    """An embedder of three words as axes: a text's vector is the sum of the axes of the
    words it holds, normalised."""

    words = ("porto", "week", "dog")

    def passages(self, texts: list[str]) -> np.ndarray:
        rows = np.array([[float(w in t.lower()) for w in self.words] for t in texts]) + 1e-3
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_a_record_scores_by_its_best_sentence_and_the_mixes() -> None:
    store = SentencePassages.embed(_Unit(), [  # type: ignore[arg-type]
        "What a long week this was for me. I moved to Porto with my partner last month.",
        "The dog is fine.",
    ])
    assert store.counts == [2, 1]
    query = np.array([[1.0, 0.0, 0.0]])  # "porto"
    scores = store.scores(query)
    whole, best = scores["whole"][0], scores["best sentence"][0]
    assert best[0] == pytest.approx(1.0, abs=1e-2)  # the Porto sentence alone
    assert whole[0] == pytest.approx(2 ** -0.5, abs=1e-2)  # diluted by the week
    assert best[1] == whole[1]  # one sentence: its whole vector
    assert scores["max(whole, best)"][0][0] == pytest.approx(best[0])
    assert scores["mean(whole, best)"][0][0] == pytest.approx((whole[0] + best[0]) / 2)
    assert scores["0.7 whole + 0.3 best"][0][0] == pytest.approx(0.7 * whole[0] + 0.3 * best[0])


def test_auc_counts_ties_as_half() -> None:
    assert auc([0.9, 0.8], [0.1]) == 1.0
    assert auc([0.1], [0.9, 0.8]) == 0.0
    assert auc([0.5], [0.5]) == 0.5


def test_the_large_store_takes_the_first_1500_locomo_turns() -> None:
    if not embedders.LOCOMO.exists():
        pytest.skip("the LoCoMo data is not here")
    turns = embedders.distractor_turns()
    assert len(turns) == 1500 and all(isinstance(t, str) and t for t in turns)


class _Words(_Unit):
    words = ("porto", "week", "dog", "tired", "cat")

    def queries(self, texts: list[str]) -> np.ndarray:
        return self.passages(texts)


def test_everyday_counts_the_questions_a_scoring_rescues_and_loses(tmp_path: Path) -> None:
    # The Porto fact is diluted by its tired week: its whole vector ranks below ten
    # distractors that say little besides "porto"; its Porto sentence ranks first.
    data = {"facts": [
        {"message": "I am so tired and it was a long week. We moved to Porto last month.",
         "reply": "Welcome to the city!", "questions": ["porto"]},
        {"message": "The dog is fine today.", "reply": "Good dog.", "questions": ["dog"]},
    ], "never_said": [{"question": "cat", "near": None}]}
    path = tmp_path / "everyday.json"
    path.write_text(json.dumps(data))
    distractors = [f"a long week number {n} in porto" for n in range(embedders.K)]
    out = embedders.everyday_sentences(_Words(), path, distractors)  # type: ignore[arg-type]
    assert out["whole"][f"recall@{embedders.K}"] == 0.5  # the Porto fact ranks below the ten
    assert out["best sentence"][f"recall@{embedders.K}"] == 1.0
    assert (out["best sentence"]["rescued"], out["best sentence"]["lost"]) == (1, 0)
    assert out["_about"]["whole_misses"] == 1 and out["_about"]["whole_misses_multi_sentence"] == 1
